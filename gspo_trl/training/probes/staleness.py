"""`engine.max_staleness` as a probe: the engine samples with weights up to d rollout batches old.

The schedule, row tags and metrics are gspo_trl.training.engine.staleness's; BehaviourProbe
corrects the gap (docs/engine-logprobs.md "Stale engine weights"). Events used:

    attach               the schedule, from the rollout batch's micro-batches and accumulation
    on_rollout_begin     the rollout batch's index (training rollouts only)
    around_weight_sync   TRL's sync runs only when the schedule says so; skipped otherwise
    on_rollout_end       each row tagged with its engine version and staleness (rides TRL's
                         shuffle and split with the rows)
    on_policy_forward    per row: its staleness, w_i, whether an off-policy update clipped it
    on_loss              those rows (all ranks), with an off-policy update's MoE flip rates
    on_log               gspo/staleness/* since the last log
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.batch import RolloutBatch
from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.diagnostics import clip_masks
from gspo_trl.training.engine.correction import response_divergence
from gspo_trl.training.engine.staleness import (
    ENGINE_STALENESS,
    ENGINE_VERSION,
    RolloutVersion,
    StalenessSchedule,
    by_staleness,
    describe,
    rollout_metrics,
)
from gspo_trl.training.probes.base import LossCall, PolicyForward, Probe
from gspo_trl.training.probes.perf import PerfProbe
from gspo_trl.training.probes.routing import RoutingProbe
from gspo_trl.training.reporting.line_parts import BANNER_GSPO, LinePart, logged_number
from gspo_trl.training.rollout_rows import ROW, Layout

logger = logging.getLogger(__name__)
T = TypeVar("T")


class StalenessProbe(Probe):
    """Delays the engine's weight syncs to every max_staleness + 1 rollout batches, and logs the lag."""

    rollout_layouts: ClassVar[dict[str, Layout]] = {ENGINE_VERSION: ROW, ENGINE_STALENESS: ROW}
    runs_after = (RoutingProbe,)  # an update's flip rates are in when on_loss reads them
    runs_before = (PerfProbe,)  # PerfProbe's weight_sync phase then times only the syncs that run

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.schedule: StalenessSchedule | None = None
        self._logged = 0
        """Rollout batches of `schedule.history` already in a log."""
        self._pending: torch.Tensor | None = None
        self._rows: list[torch.Tensor] = []
        self._in_rollout = False
        """Between on_rollout_begin and on_rollout_end (a sync outside one is held-out scoring's)."""

    def attach(self, trainer: Any) -> None:
        batch = RolloutBatch.from_grpo_config(trainer.args)
        self.schedule = StalenessSchedule(
            self.config.max_staleness, batch.micro_batches, batch.gradient_accumulation_steps
        )

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        if not self.config.max_staleness:
            return []
        return [LinePart(BANNER_GSPO + 12, f"  engine   max_staleness {describe(self.config.max_staleness)}")]

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        """`stale 0.5 (max 1)`: the rollouts' lag in rollout batches."""
        stale = logged_number(logs, names.STALENESS_MEAN)
        if stale is None:
            return []
        most = logged_number(logs, names.STALENESS_MAX)
        return [LinePart(60, f"stale {stale:.1f}" + (f" (max {most:.0f})" if most is not None else ""))]

    def on_rollout_begin(self, trainer: Any, training: bool) -> None:
        self._in_rollout = True
        self.schedule.begin_rollout(trainer.state.global_step, training)

    def around_weight_sync(self, trainer: Any, proceed: Callable[[], T]) -> T | None:
        # Outside a rollout the caller is held-out scoring: it must score the current policy.
        if not self.schedule.sync_due(self._in_rollout):
            return None  # the engine keeps the weights of its last sync
        result = proceed()
        self.schedule.synced(trainer.state.global_step, self._in_rollout)
        return result

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        self._in_rollout = False
        return self.schedule.tag(batch) if trainer.model.training else batch

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        inputs = policy.loss.inputs
        if not policy.loss.training or ENGINE_STALENESS not in inputs:
            return
        staleness = inputs[ENGINE_STALENESS].double().cpu()
        nan = torch.full_like(staleness, float("nan"))
        weight, clipped = nan, nan
        mu = inputs.get("sampling_per_token_logps")
        if mu is not None:
            pi_old = policy.logps if policy.old_logps is None else policy.old_logps
            divergence = response_divergence(pi_old, mu, policy.scored_mask)
            weight = torch.exp(divergence.log_weight).cpu()
        if policy.loss.minibatch >= 2:  # the clip of an off-policy update, TRL's rule
            masks = clip_masks(policy.log_s, inputs["advantages"], trainer.epsilon_low, trainer.epsilon_high)
            clipped = torch.from_numpy(masks["low"] | masks["high"]).double()
        self._pending = torch.stack([staleness, weight, clipped], dim=1)

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        rows, self._pending = self._pending, None
        if rows is None:
            return
        accelerator = trainer.accelerator
        if accelerator.num_processes > 1:  # ranks may hold different batch sizes: pad, then gather
            padded = accelerator.pad_across_processes(rows.to(accelerator.device), dim=0, pad_index=-1)
            rows = accelerator.gather(padded).cpu()
        routing = trainer.probes.find(RoutingProbe)
        flips = getattr(routing and routing.routing, "last_response_rates", None)  # all ranks', padded
        column = torch.full((rows.shape[0], 1), float("nan"), dtype=torch.float64)
        if flips is not None and flips.shape[0] == rows.shape[0] and loss.minibatch >= 2:
            column = flips.double().reshape(-1, 1).cpu()
        rows = torch.cat([rows, column], dim=1)
        self._rows.append(rows[rows[:, 0] >= 0])

    def on_log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        if not trainer.model.training:
            return {}
        new: list[RolloutVersion] = self.schedule.history[self._logged :]
        self._logged = len(self.schedule.history)
        out = rollout_metrics(new)
        if self._rows:
            out.update(by_staleness(torch.cat(self._rows)))
            self._rows.clear()
        return out
