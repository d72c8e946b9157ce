"""The probe protocol: what GSPOTrainer tells each probe, and what a probe may answer.

GSPOTrainer (gspo_trl.training.trainer) overrides each TRL hook once and hands the event to its
probes in list order; the same order is the order of their callbacks. A probe owns its typed
section, its state, its metrics and its callbacks; it never names a TRL private method (only
trainer.py does, each override quoting the TRL line it relies on). `Probe`'s docstring lists the
events with the TRL call each comes from; docs/probes.md shows how to write one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, TypeVar

import torch
from transformers import TrainerCallback

from gspo_trl.training.ratio_stats import sequence_log_ratio
from gspo_trl.training.reporting.line_parts import LinePart
from gspo_trl.training.rollout_rows import Layout

T = TypeVar("T")
LogprobOutput = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]
"""`_get_per_token_logps_and_entropies`'s result: per-token log-probs (B, C), entropies, aux loss."""


@dataclass
class ProbeCallbacks:
    """A probe's TrainerCallbacks. `before_reporting` run ahead of transformers' own and the
    trackers' in every callback event (e.g. a final score logged before a tracker closes its run,
    a metrics file truncated before the first log); `after_reporting` after them (e.g. a callback
    that logs through trackers already set up). Within each, the probe list's order."""

    before_reporting: list[TrainerCallback] = field(default_factory=list)
    after_reporting: list[TrainerCallback] = field(default_factory=list)


@dataclass
class Generation:
    """TRL's `_generate(prompts)` result, one entry per completion of this rank's rollout batch."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    sampling_logprobs: list[list[float | None]] | None
    """The engine's log-prob of each sampled token (vLLM), None without an engine."""
    training: bool
    raw: tuple[Any, ...]
    """The whole tuple TRL returned (prompt ids, completion ids, tool mask, completions, ...)."""


@dataclass
class NoGradPass:
    """A `_get_per_token_logps_and_entropies` call outside the loss: pi_old or the reference model."""

    model: Any
    is_policy: bool
    """The model being trained (pi_old's pass), not a reference copy."""
    attention_mask: torch.Tensor | None
    """(B, P + C) over the prompt and completion tokens."""
    logits_to_keep: int | None
    """C, the completion width."""
    training: bool
    answer: LogprobOutput | None = None
    """Set once a probe answered (`answer_no_grad_pass`): then no forward runs."""


@dataclass
class LossCall:
    """One `_compute_loss(model, inputs)`: a minibatch (training) or an eval batch."""

    inputs: dict[str, Any]
    """A copy of TRL's minibatch dict: what the loss reads; a probe may change its entries."""
    batch: dict[str, Any]
    """TRL's own dict (its buffer, reused by later updates of the same rollout batch): read only."""
    training: bool
    minibatch: int
    """1-based index of this update within its rollout batch (1 = on-policy)."""
    last_micro_batch: bool
    """The minibatch's last gradient-accumulation micro-batch (its optimizer step follows)."""


@dataclass
class PolicyForward:
    """The loss's policy forward, observed before TRL forms the ratio."""

    logps: torch.Tensor
    """Per-token log-probs under the current weights, detached, (B, C)."""
    entropies: torch.Tensor | None
    old_logps: torch.Tensor | None
    """pi_old's per-token log-probs as TRL received them (None: on-policy, pi_old = pi_theta)."""
    scored_mask: torch.Tensor
    """The tokens the loss averages: completion mask x tool mask, (B, C)."""
    loss: LossCall

    @cached_property
    def log_s(self) -> torch.Tensor:
        """log s_i, the length-normalised sequence log-ratio per response, (B,)."""
        old = self.logps if self.old_logps is None else self.old_logps
        return sequence_log_ratio(self.logps, old, self.scored_mask)


@dataclass
class CheckpointSave:
    """A `Trainer._save_checkpoint`: `write_dir` is the folder the Trainer writes `name` under
    (default `run_dir`); a probe may point it elsewhere for the duration of the save."""

    run_dir: str
    name: str
    write_dir: str


class Probe:
    """Base class: every event a no-op; subclass it and override what you need.

    Events, in the order of one training step, with the TRL call each comes from (trl 1.16,
    trl/trainer/grpo_trainer.py unless named):

        trainer_init()                   around GRPOTrainer.__init__ (a context manager)
        attach(trainer)                  end of GSPOTrainer.__init__ (the model and vLLM are built)
        on_train_begin / on_train_end    GSPOTrainer.train, around Trainer.train (end: also on error)
        around_rollout(prompts, proceed) `_generate_and_score_completions` (called by `_prepare_inputs`
          on_rollout_begin                 every steps_per_generation x num_iterations steps, :1541)
          around_generation(proceed)       `_generate(prompts)` (:2436)
            around_weight_sync(proceed)      `self.vllm_generation.sync_weights()` (:2204): skip
                                             `proceed` to keep the engine's weights this time
          on_generation(Generation)        its result: token ids and the engine's sampled log-probs
          answer_no_grad_pass(NoGradPass)  pi_old's / the reference model's no-grad
          around_no_grad_pass(proceed)       `_get_per_token_logps_and_entropies` (:2646, :2712): the
                                             first probe to answer replaces the forward
          around_rewards(proceed)          `_calculate_rewards(...)` (:2753)
          on_rollout_end(batch) -> batch   the scored rollout dict TRL returns (:2936): a probe may
                                           add keys, reweight, mask or drop rows
        on_loss_inputs(LossCall)         `_compute_loss(model, inputs)` (:3020), before TRL reads the
                                         inputs: `LossCall.inputs` is a copy a probe may change
        on_policy_forward(PolicyForward) the loss's own `_get_per_token_logps_and_entropies`
                                         (:3030): log-probs and log s_i, before the ratio is formed
        on_loss(LossCall, loss)          `_compute_loss` returned
        on_training_step_end             `training_step` returned (after the backward)
        around_evaluate(proceed)         transformers `Trainer._evaluate`
        around_checkpoint_save(save, proceed)  transformers `Trainer._save_checkpoint`; `save.write_dir`
                                         says where the Trainer writes
        on_log(logs) -> metrics          GSPOTrainer.log, before TRL's `log` (:3302) averages and emits

    What a probe adds around the events it declares (class attributes and the methods below the
    events' list), and the chain, the console, dynamic sampling and the checkpoint code read them:
    no list elsewhere names a probe's loggers, keys, banner or step-line parts, or saved state.
    """

    alarm_loggers: ClassVar[tuple[str, ...]] = ()
    """Loggers whose warnings are this probe's alarms: the console prints them as `!` lines."""
    rollout_layouts: ClassVar[Mapping[str, Layout]] = {}
    """Keys this probe adds to TRL's rollout dict, with their layout: dynamic sampling moves them
    with their rows (gspo_trl.training.rollout_rows)."""
    runs_after: ClassVar[tuple[type, ...]] = ()
    """Probe classes that must come earlier in the chain (ProbeChain refuses another order)."""
    runs_before: ClassVar[tuple[type, ...]] = ()
    """Probe classes that must come later in the chain (`(Probe,)`: this one comes first)."""

    state_key: ClassVar[str | None] = None
    """This probe's entry in every checkpoint's trainer_state.json (`stateful_callbacks`, beside
    transformers' `ExportableState` callbacks): `state()` is saved under it and `load_state`
    given it back on resume. None: the probe keeps nothing across a resume."""

    def state(self) -> dict[str, Any] | None:
        """What a checkpoint saves (JSON values), transformers' `ExportableState.state()`
        "attributes"; None: nothing to save at this checkpoint."""
        return None

    def load_state(self, attributes: Mapping[str, Any]) -> None:
        """A resumed run's saved `state()`, before its first step (not called on a fresh run)."""

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        """Lines this probe adds to the console's start banner, each at its place
        (gspo_trl.training.reporting.line_parts); [] when it has nothing to say for this run."""
        return []

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        """Parts this probe adds to a training log event's step line, from what was logged."""
        return []

    def callbacks(self) -> ProbeCallbacks:
        return ProbeCallbacks()

    def trainer_init(self) -> AbstractContextManager[None]:
        """Around GRPOTrainer.__init__ (before `attach`): e.g. to have TRL build its vLLM engine
        a certain way."""
        return nullcontext()

    def attach(self, trainer: Any) -> None:
        """The trainer is built: take what you need from it (model, accelerator, args)."""

    def on_train_begin(self, trainer: Any) -> None:
        pass

    def on_train_end(self, trainer: Any) -> None:
        """After Trainer.train, also when it raised."""

    def around_rollout(
        self, trainer: Any, prompts: list[Any], proceed: Callable[[list[Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """`prompts`: this rollout batch's rows (TRL's `generation_batch`); `proceed(rows)` generates
        and scores rows, and may be called again (with other rows: e.g. to refill a batch)."""
        return proceed(prompts)

    def on_rollout_begin(self, trainer: Any, training: bool) -> None:
        pass

    def around_generation(self, trainer: Any, proceed: Callable[[], tuple]) -> tuple:
        return proceed()

    def around_weight_sync(self, trainer: Any, proceed: Callable[[], T]) -> T | None:
        return proceed()

    def on_generation(self, trainer: Any, generation: Generation) -> None:
        pass

    def answer_no_grad_pass(self, trainer: Any, call: NoGradPass) -> LogprobOutput | None:
        """Return log-probs to stand in for this forward (the first probe to answer wins)."""
        return None

    def around_no_grad_pass(
        self, trainer: Any, call: NoGradPass, proceed: Callable[[], LogprobOutput]
    ) -> LogprobOutput:
        return proceed()

    def around_rewards(self, trainer: Any, proceed: Callable[[], torch.Tensor]) -> torch.Tensor:
        return proceed()

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        return batch

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        pass

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        pass

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        pass

    def on_training_step_end(self, trainer: Any) -> None:
        pass

    def around_evaluate(self, trainer: Any, proceed: Callable[[], T]) -> T:
        return proceed()

    def around_checkpoint_save(self, trainer: Any, save: CheckpointSave, proceed: Callable[[], None]) -> None:
        proceed()

    def on_log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        """Metrics to add to this log event (`logs`: what it holds so far; names: metric_names)."""
        return {}
