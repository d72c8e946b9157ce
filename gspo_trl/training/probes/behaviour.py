"""`engine.correction` as a probe: each response's loss weighed for the engine/trainer gap.

The run's state and the logging are gspo_trl.training.engine.behaviour's, the arithmetic
gspo_trl.training.engine.correction's; docs/engine-logprobs.md says when to turn it on. It goes
after EngineLogprobsProbe, whose answer decides what pi_old is. Events used:

    attach               the correction, its `auto` thresholds pending or fixed
    on_rollout_end       trainer mode: calibrate `auto` on the whole first rollout batch
    on_loss_inputs       let TRL apply the weight in this loss (`trl_loss_weight`)
    on_policy_forward    the weight, into the loss's copy as `importance_sampling_ratio` (B, 1)
    on_loss              TRL's flag back; the rollout batch's last update: its gspo/behaviour/*
    on_log               those metrics, averaged over the rollout batches since the last log
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import DiagnosticsConfig, EngineConfig
from gspo_trl.training.engine.behaviour import BehaviourCorrection, trl_loss_weight
from gspo_trl.training.probes.base import LossCall, PolicyForward, Probe
from gspo_trl.training.probes.engine import EngineLogprobsProbe
from gspo_trl.training.reporting.line_parts import BANNER_GSPO, LinePart, logged_number

logger = logging.getLogger(__name__)


class BehaviourProbe(Probe):
    """The behaviour correction of a run (inert unless `engine.correction` is truncate or reject)."""

    alarm_loggers = (BehaviourCorrection.__module__,)  # max_rejected
    runs_after = (EngineLogprobsProbe,)  # its answer decides what pi_old is

    def __init__(self, config: EngineConfig, diagnostics: DiagnosticsConfig | None = None) -> None:
        self.config = config
        self.correction = BehaviourCorrection(config, (diagnostics or DiagnosticsConfig()).length_buckets)
        self._updates_per_rollout = 1
        self._loss_weight = ExitStack()
        self._summaries: list[dict[str, float]] = []

    @property
    def active(self) -> bool:
        return self.correction.active

    def attach(self, trainer: Any) -> None:
        accelerator = trainer.accelerator
        if accelerator.num_processes > 1:

            def gather(rows: torch.Tensor) -> torch.Tensor:
                padded = accelerator.pad_across_processes(
                    rows.to(accelerator.device), dim=0, pad_index=float("nan")
                )
                return accelerator.gather(padded).cpu()

            self.correction.gather = gather
        args = trainer.args
        generate_every = args.steps_per_generation * trainer.num_iterations
        self._updates_per_rollout = generate_every // args.gradient_accumulation_steps

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        if not self.correction.active:
            return []
        return [LinePart(BANNER_GSPO + 11, f"  engine   correction {self.correction.describe()}")]

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        """`w_i 0.998 [0.95, 1.02]`: the correction's weight w_i = pi_old / mu, mean [p1, p99]."""
        weight = logged_number(logs, names.BEHAVIOUR_WEIGHT_MEAN)
        if weight is None:
            return []
        low = logged_number(logs, names.BEHAVIOUR_WEIGHT_P1)
        high = logged_number(logs, names.BEHAVIOUR_WEIGHT_P99)
        spread = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
        return [LinePart(70, f"w_i {weight:.3f}{spread}")]

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        if self.active and trainer.model.training:
            mask = batch["completion_mask"] * batch.get("tool_mask", 1)
            self.correction.calibrate_rollout(
                batch.get("old_per_token_logps"), batch.get("sampling_per_token_logps"), mask
            )
        return batch

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        if self.active and loss.training:
            self._loss_weight.enter_context(trl_loss_weight(trainer, True))

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        if not (self.active and policy.loss.training):
            return
        engine = trainer.probes.find(EngineLogprobsProbe)
        from_engine = engine is not None and engine.engine.active  # pi_old = mu: compare the update's own
        pi = policy.logps if from_engine or policy.old_logps is None else policy.old_logps
        inputs = policy.loss.inputs
        inputs["importance_sampling_ratio"] = self.correction.weigh(
            pi, inputs.get("sampling_per_token_logps"), policy.scored_mask
        )

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        self._loss_weight.close()
        if (
            self.active
            and loss.training
            and loss.last_micro_batch
            and loss.minibatch == self._updates_per_rollout
        ):
            self._summaries.append(self.correction.finish_rollout())

    def on_train_end(self, trainer: Any) -> None:
        self._loss_weight.close()  # also when the loss raised

    def on_log(self, trainer: Any, logs: Any) -> dict[str, float]:
        summaries, self._summaries = [s for s in self._summaries if s], []
        keys = {key for s in summaries for key in s}
        return {
            key: sum(s[key] for s in summaries if key in s) / sum(key in s for s in summaries) for key in keys
        }
