"""Phase timings, token counts and MFU (`perf/*`, gspo_trl.training.reporting.phases) as a probe:
each phase is timed around the TRL call its event comes from (probes.base lists them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.training.probes.base import (
    CheckpointSave,
    Generation,
    LogprobOutput,
    LossCall,
    NoGradPass,
    Probe,
    ProbeCallbacks,
)
from gspo_trl.training.probes.packing import PackingProbe
from gspo_trl.training.reporting.line_parts import BANNER_RUN, LinePart, logged_number
from gspo_trl.training.reporting.phases import PerfMeter, UpdatePhaseCallback, trainer_model_shape

T = TypeVar("T")


def timed(trainer: Any, phase: str) -> AbstractContextManager:
    """`trainer`'s phase, or nothing for a trainer without a PerfProbe (a plain GRPOTrainer)."""
    probes = getattr(trainer, "probes", None)
    perf = probes.find(PerfProbe) if probes is not None else None
    return perf.meter.timer.phase(phase) if perf is not None and perf.meter is not None else nullcontext()


class PerfProbe(Probe):
    """Owns the run's PerfMeter; `setup` runs from GSPOTrainer.train to on_train_begin."""

    def __init__(self) -> None:
        self.meter: PerfMeter | None = None
        self.packed = False
        """`packing: true`: the updates' FLOPs count each row's own tokens, as its forwards run."""

    def attach(self, trainer: Any) -> None:
        self.meter = PerfMeter(
            trainer.accelerator.device,
            trainer_model_shape(trainer.model),
            bool(trainer.args.gradient_checkpointing),
        )
        self.packed = trainer.probes.find(PackingProbe) is not None

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        """The plan's FLOP floor beside what the step line will show (last in the banner)."""
        return [LinePart(BANNER_RUN + 20, self.meter.ceiling_line(trainer.args.max_completion_length))]

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        """`1,234 tok/s MFU 1.2%`: trained tokens per second per process, and the MFU."""
        tokens_per_s = logged_number(logs, names.PERF_TRAINED_TOKENS_PER_S)
        if tokens_per_s is None:
            return []
        mfu = logged_number(logs, names.PERF_MFU)
        return [LinePart(100, f"{tokens_per_s:,.0f} tok/s" + (f" MFU {mfu:.1%}" if mfu is not None else ""))]

    def callbacks(self) -> ProbeCallbacks:
        return ProbeCallbacks(after_reporting=[UpdatePhaseCallback(self.meter.timer)])

    def _phase(self, phase: str, proceed: Callable[[], T]) -> T:
        with self.meter.timer.phase(phase):
            return proceed()

    def on_train_begin(self, trainer: Any) -> None:
        self.meter.timer.reset()
        self.meter.timer.start(names.PHASE_SETUP)  # until on_train_begin (UpdatePhaseCallback)

    def around_generation(self, trainer: Any, proceed: Callable[[], tuple]) -> tuple:
        return self._phase(names.PHASE_GENERATION, proceed)

    def on_generation(self, trainer: Any, generation: Generation) -> None:
        if generation.training:
            self.meter.count_generated(generation.completion_ids)

    def around_weight_sync(self, trainer: Any, proceed: Callable[[], T]) -> T:
        return self._phase(names.PHASE_WEIGHT_SYNC, proceed)

    def around_rewards(self, trainer: Any, proceed: Callable[[], torch.Tensor]) -> torch.Tensor:
        return self._phase(names.PHASE_REWARDS, proceed)

    def around_no_grad_pass(
        self, trainer: Any, call: NoGradPass, proceed: Callable[[], LogprobOutput]
    ) -> LogprobOutput:
        """pi_old (and the reference model): 0 s when the engine answered."""
        return self._phase(names.PHASE_OLD_LOGPROBS, proceed) if call.training else proceed()

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        if loss.training:
            self.meter.count_update(loss.batch, self.packed)

    def around_evaluate(self, trainer: Any, proceed: Callable[[], T]) -> T:
        """The Trainer's eval pass (the held-out callback times its own)."""
        return self._phase(names.PHASE_HELDOUT, proceed)

    def around_checkpoint_save(self, trainer: Any, save: CheckpointSave, proceed: Callable[[], None]) -> None:
        self._phase(names.PHASE_CHECKPOINT, proceed)

    def on_log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        if trainer.model.training and "loss" in logs:  # a training log event: one perf window
            out.update(self.meter.logs(trainer.accelerator))
        if "train_runtime" in logs:  # the end-of-training summary: the run's sums
            self.meter.timer.window()
            out.update(self.meter.totals())
        return out
