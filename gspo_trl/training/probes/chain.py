"""ProbeChain: hands each trainer event to the probes, in list order.

Notifications go to every probe in order; `around_*` events nest, the first probe outermost
(it sees the call first and its result last), TRL's own call innermost; `answer_no_grad_pass`
stops at the first answer; `on_rollout_end` threads the batch through each probe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from functools import partial
from typing import Any, TypeVar

import torch

from gspo_trl.training.probes.base import (
    CheckpointSave,
    Generation,
    LogprobOutput,
    LossCall,
    NoGradPass,
    PolicyForward,
    Probe,
    ProbeCallbacks,
)
from gspo_trl.training.reporting.line_parts import LinePart
from gspo_trl.training.rollout_rows import Layout

T = TypeVar("T")


class ProbeChain(Sequence[Probe]):
    """The trainer's probes, in event order, checked against each probe's `runs_after` and
    `runs_before` when built or extended."""

    def __init__(self, probes: Sequence[Probe]) -> None:
        self.probes = list(probes)
        check_order(self.probes)
        self._handlers: dict[str, list[Probe]] = {}

    def append(self, probe: Probe) -> None:
        """Add a probe last (its order constraints checked)."""
        check_order([*self.probes, probe])
        self.probes.append(probe)
        self._handlers.clear()

    def handlers(self, event: str) -> list[Probe]:
        """The probes that handle `event` (a `Probe` method), in chain order: those whose class or
        instance overrides it; the base class's no-ops are not called (a step's events would
        otherwise make ~200 calls that do nothing). Listed at the event's first dispatch."""
        found = self._handlers.get(event)
        if found is None:
            found = [p for p in self.probes if _overrides(p, event)]
            self._handlers[event] = found
        return found

    def alarm_loggers(self) -> tuple[str, ...]:
        """Every probe's alarm loggers, each once, in chain order."""
        return tuple(dict.fromkeys(name for probe in self.probes for name in probe.alarm_loggers))

    def rollout_layouts(self) -> dict[str, Layout]:
        """The rollout keys the probes add, with their layouts."""
        return {key: layout for probe in self.probes for key, layout in probe.rollout_layouts.items()}

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        """Every probe's banner lines, in chain order (the console sorts them by place)."""
        return [part for probe in self.probes for part in probe.banner_lines(trainer)]

    def __getitem__(self, index: int) -> Probe:  # type: ignore[override]
        return self.probes[index]

    def __len__(self) -> int:
        return len(self.probes)

    def __iter__(self) -> Iterator[Probe]:
        return iter(self.probes)

    def find(self, kind: type[T]) -> T | None:
        """The first probe of `kind`, or None."""
        return next((p for p in self.probes if isinstance(p, kind)), None)

    def _around(self, method: str, trainer: Any, args: tuple, innermost: Callable[[], Any]) -> Any:
        call = innermost
        for probe in reversed(self.handlers(method)):
            call = partial(getattr(probe, method), trainer, *args, call)
        return call()

    # --- setup and lifecycle --------------------------------------------------------------
    def callbacks(self) -> ProbeCallbacks:
        merged = ProbeCallbacks()
        for probe in self.probes:
            own = probe.callbacks()
            merged.before_reporting += own.before_reporting
            merged.after_reporting += own.after_reporting
        return merged

    def trainer_init(self) -> ExitStack:
        stack = ExitStack()
        for probe in self.probes:
            stack.enter_context(probe.trainer_init())
        return stack

    def attach(self, trainer: Any) -> None:
        for probe in self.probes:
            probe.attach(trainer)

    def train_begin(self, trainer: Any) -> None:
        for probe in self.handlers("on_train_begin"):
            probe.on_train_begin(trainer)

    def train_end(self, trainer: Any) -> None:
        for probe in self.handlers("on_train_end"):
            probe.on_train_end(trainer)

    # --- rollout --------------------------------------------------------------------------
    def rollout(
        self, trainer: Any, prompts: list[Any], generate_and_score: Callable[[list[Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        def scored(rows: list[Any]) -> dict[str, Any]:
            training = trainer.model.training
            for probe in self.handlers("on_rollout_begin"):
                probe.on_rollout_begin(trainer, training)
            batch = generate_and_score(rows)
            for probe in self.handlers("on_rollout_end"):
                batch = probe.on_rollout_end(trainer, batch)
            return batch

        call = scored
        for probe in reversed(self.handlers("around_rollout")):
            call = partial(_rollout_step, probe, trainer, call)
        return call(prompts)

    def generation(self, trainer: Any, generate: Callable[[], tuple]) -> tuple:
        return self._around("around_generation", trainer, (), generate)

    def generated(self, trainer: Any, generation: Generation) -> None:
        for probe in self.handlers("on_generation"):
            probe.on_generation(trainer, generation)

    def weight_sync(self, trainer: Any, sync: Callable[[], Any]) -> Any:
        return self._around("around_weight_sync", trainer, (), sync)

    def no_grad_pass(
        self, trainer: Any, call: NoGradPass, forward: Callable[[], LogprobOutput]
    ) -> LogprobOutput:
        for probe in self.handlers("answer_no_grad_pass"):
            call.answer = probe.answer_no_grad_pass(trainer, call)
            if call.answer is not None:
                break
        answer = call.answer
        return self._around(
            "around_no_grad_pass", trainer, (call,), forward if answer is None else lambda: answer
        )

    def rewards(self, trainer: Any, calculate: Callable[[], torch.Tensor]) -> torch.Tensor:
        return self._around("around_rewards", trainer, (), calculate)

    # --- updates ----------------------------------------------------------------------------
    def loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        for probe in self.handlers("on_loss_inputs"):
            probe.on_loss_inputs(trainer, loss)

    def policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        for probe in self.handlers("on_policy_forward"):
            probe.on_policy_forward(trainer, policy)

    def loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        for probe in self.handlers("on_loss"):
            probe.on_loss(trainer, loss, value)

    def training_step_end(self, trainer: Any) -> None:
        for probe in self.handlers("on_training_step_end"):
            probe.on_training_step_end(trainer)

    # --- state kept across a resume ----------------------------------------------------------
    def save_state(self, trainer: Any) -> None:
        """Each stateful probe's `state()` into `trainer.state.stateful_callbacks`, in the shape
        transformers writes an `ExportableState`'s (`{"args": ..., "attributes": ...}`, saved to
        trainer_state.json with the checkpoint)."""
        for probe in self.probes:
            saved = probe.state() if probe.state_key else None
            if saved is not None:
                trainer.state.stateful_callbacks[probe.state_key] = {"args": {}, "attributes": saved}

    def load_state(self, trainer: Any) -> None:
        """The resumed checkpoint's saved states back into their probes (none on a fresh run)."""
        saved = trainer.state.stateful_callbacks or {}
        for probe in self.probes:
            if probe.state_key and saved.get(probe.state_key):
                probe.load_state(saved[probe.state_key]["attributes"])

    # --- evaluation, checkpoints, logs ---------------------------------------------------------
    def evaluate(self, trainer: Any, evaluate: Callable[[], T]) -> T:
        return self._around("around_evaluate", trainer, (), evaluate)

    def checkpoint_save(self, trainer: Any, save: CheckpointSave, write: Callable[[], None]) -> None:
        self._around("around_checkpoint_save", trainer, (save,), write)

    def log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        added: dict[str, float] = {}
        for probe in self.handlers("on_log"):
            added.update(probe.on_log(trainer, {**logs, **added}))
        return added


def _overrides(probe: Probe, event: str) -> bool:
    """The probe's class, or the probe itself, replaces `Probe`'s no-op for `event`."""
    return getattr(type(probe), event) is not getattr(Probe, event) or event in getattr(probe, "__dict__", ())


def check_order(probes: Sequence[Probe]) -> None:
    """Raise ValueError (one line) when a probe comes before one it must follow, or after one it
    must precede."""
    for index, probe in enumerate(probes):
        earlier, later = probes[:index], probes[index + 1 :]
        for kind in probe.runs_after:
            if misplaced := next((p for p in later if isinstance(p, kind)), None):
                _refuse(probes, probe, "after", misplaced)
        for kind in probe.runs_before:
            if misplaced := next((p for p in earlier if isinstance(p, kind) and p is not probe), None):
                _refuse(probes, probe, "before", misplaced)


def _refuse(probes: Sequence[Probe], probe: Probe, where: str, other: Probe) -> None:
    order = ", ".join(type(p).__name__ for p in probes)
    raise ValueError(
        f"probe order: {type(probe).__name__} must come {where} {type(other).__name__} "
        f"(given: {order}); reorder the probes"
    )


def _rollout_step(probe: Probe, trainer: Any, proceed: Callable[[list[Any]], dict], rows: list[Any]) -> dict:
    return probe.around_rollout(trainer, rows, proceed)
