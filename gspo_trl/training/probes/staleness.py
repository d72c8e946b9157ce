"""`engine.max_staleness` as a probe: when the engine's weights are synced, and how old each row is.

With d = max_staleness the engine is synced at rollout batch r only when r % (d + 1) == 0, so a
row is 0 to d rollout batches stale (d / 2 on average). r counts the training rollouts that begin
at a new optimizer step. A resumed run keeps the uninterrupted run's sync points and also syncs its
first rollout batch (its engine holds other weights); eval rollouts and held-out scoring always
sync, since they must score the current policy.

Each row is tagged in TRL's rollout dict: ENGINE_VERSION, the optimizer step whose weights sampled
it, and ENGINE_STALENESS, how many rollout batches older those weights are than the rollout's own.
CorrectionProbe corrects the gap. The schedule, the counting of r and the decoupled objective:
docs/engine-logprobs.md ("Stale engine weights").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.batch import RolloutBatch
from gspo_trl.config.sections.engine_staleness import StalenessSettings, describe_staleness
from gspo_trl.training.engine.response_weights import response_divergence
from gspo_trl.training.probes.base import LossCall, PolicyForward, Probe
from gspo_trl.training.probes.perf import PerfProbe
from gspo_trl.training.probes.routing import RoutingProbe
from gspo_trl.training.ratio_stats import clip_masks
from gspo_trl.training.reporting.line_parts import BANNER_GSPO, LinePart, logged_number
from gspo_trl.training.rollout_rows import ROW, Layout

logger = logging.getLogger(__name__)
T = TypeVar("T")


ENGINE_VERSION = "engine_version"
"""Rollout dict key: (B,) int64, the optimizer step whose weights the engine sampled the row with."""
ENGINE_STALENESS = "engine_staleness"
"""Rollout dict key: (B,) int64, rollout batches between the engine's weights and the row's batch."""


@dataclass(frozen=True)
class RolloutVersion:
    """One training rollout batch: its index, its step, and the engine's weights that sampled it."""

    rollout: int
    """r, 0-based over the whole run (resumes included)."""
    step: int
    """The optimizer step at its start (the trainer's weights pi_old is recomputed with)."""
    engine_rollout: int
    """The rollout batch at whose start the engine was last synced."""
    engine_step: int
    """The optimizer step of the engine's weights: the row's version."""

    @property
    def staleness(self) -> int:
        """Rollout batches the engine's weights lag the trainer's (0 .. max_staleness)."""
        return self.rollout - self.engine_rollout

    @property
    def updates(self) -> int:
        """Optimizer steps the engine's weights lag the trainer's."""
        return self.step - self.engine_step


class StalenessSchedule:
    """A run's engine syncs under `max_staleness` d: `begin_rollout`, then `sync_due`, `synced`."""

    def __init__(self, max_staleness: int, micro_batches: int, gradient_accumulation_steps: int) -> None:
        self.max_staleness = max_staleness
        self.micro_batches = micro_batches
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.rollout: int | None = None
        """The current training rollout batch's index; None before this process's first."""
        self.step = 0
        self.training = False
        self.engine: tuple[int | None, int] | None = None
        """(rollout, step) of the engine's last sync by this process (rollout None: a sync outside
        a training rollout, resolved from its step when a row is tagged); None: the weights the
        engine was built with."""
        self._first = False
        self.history: list[RolloutVersion] = []
        """Every training rollout batch of this process, in order (tests and benchmarks read it)."""

    def begin_rollout(self, global_step: int, training: bool) -> None:
        self.training = training
        if not training or (self.rollout is not None and global_step == self.step):
            return  # an eval, or another round (or rollout batch) of the same step
        self._first = self.rollout is None
        if self._first:
            per_step = max(self.micro_batches, self.gradient_accumulation_steps)
            self.rollout = -(-global_step * self.gradient_accumulation_steps // per_step)
        else:
            self.rollout += 1
        self.step = global_step

    def sync_due(self, in_rollout: bool = True) -> bool:
        """Sync now? Outside a rollout (held-out scoring) and in an eval rollout always; else at
        the schedule's rollouts, at this process's first training rollout, and whenever the
        engine holds none of this process's versions."""
        if self.engine is None or not in_rollout or not self.training:
            return True
        return self.training and (self._first or self.rollout % (self.max_staleness + 1) == 0)

    def synced(self, global_step: int, in_rollout: bool = True) -> None:
        inside = in_rollout and self.training and self.rollout is not None and global_step == self.step
        self.engine = (self.rollout if inside else None, global_step)

    def _rollout_at(self, step: int) -> int:
        """The training rollout batch whose span holds optimizer step `step` (the current one when
        `step` is its start or later; the latest earlier start otherwise)."""
        if step >= self.step:
            return self.rollout
        earlier = [v.rollout for v in self.history if v.step <= step]
        return earlier[-1] if earlier else self.rollout

    def current(self) -> RolloutVersion:
        """The training rollout batch being generated, with the engine's version."""
        engine_rollout, engine_step = self.engine
        if engine_rollout is None:
            engine_rollout = self._rollout_at(engine_step)
            self.engine = (engine_rollout, engine_step)
        version = RolloutVersion(self.rollout, self.step, engine_rollout, engine_step)
        if not self.history or self.history[-1].rollout != version.rollout:
            self.history.append(version)
        return version

    def tag(self, batch: dict[str, Any]) -> dict[str, Any]:
        """A training rollout `batch` with each row's ENGINE_VERSION and ENGINE_STALENESS (B,)."""
        version = self.current()
        rows = batch["completion_ids"]
        for key, value in ((ENGINE_VERSION, version.engine_step), (ENGINE_STALENESS, version.staleness)):
            batch[key] = torch.full((rows.shape[0],), value, dtype=torch.long, device=rows.device)
        return batch


def by_staleness(rows: torch.Tensor) -> dict[str, float]:
    """`gspo/staleness/d{k}/*` from rows [staleness, w_i, clipped, flip rate] (NaN: not measured),
    one per response and update: w_i's mean and std, the share clipped (0-1), the mean per-response
    flip rate (0-1), and how many rows each staleness k had."""
    out: dict[str, float] = {}
    for k in sorted({int(v) for v in rows[:, 0].tolist()}):
        group = rows[rows[:, 0] == k].double()
        weight, clipped, flips = (c[~c.isnan()] for c in group[:, 1:].unbind(1))
        stats = {names.STALENESS_RESPONSES: float(group.shape[0])}
        if weight.numel():
            stats[names.STALENESS_WEIGHT_MEAN] = weight.mean().item()
            stats[names.STALENESS_WEIGHT_STD] = weight.std().item() if weight.numel() > 1 else 0.0
        if clipped.numel():
            stats[names.STALENESS_CLIP] = clipped.mean().item()
        if flips.numel():
            stats[names.STALENESS_FLIP_RATE] = flips.mean().item()
        out.update({names.by_staleness(k, stat): v for stat, v in stats.items()})
    return out


def rollout_metrics(versions: list[RolloutVersion]) -> dict[str, float]:
    """`gspo/staleness/{mean,max,updates,engine_step}` over the rollout batches generated since the
    last log (empty when none was)."""
    if not versions:
        return {}
    lags = [v.staleness for v in versions]
    return {
        names.STALENESS_MEAN: sum(lags) / len(lags),
        names.STALENESS_MAX: float(max(lags)),
        names.STALENESS_UPDATES: sum(v.updates for v in versions) / len(versions),
        names.STALENESS_ENGINE_STEP: float(versions[-1].engine_step),
    }


def stale_line_parts(logs: Mapping[str, Any]) -> list[LinePart]:
    """`stale 0.5 (max 1)`: the rollouts' lag in rollout batches (this probe's and OverlapProbe's)."""
    stale = logged_number(logs, names.STALENESS_MEAN)
    if stale is None:
        return []
    most = logged_number(logs, names.STALENESS_MAX)
    return [LinePart(60, f"stale {stale:.1f}" + (f" (max {most:.0f})" if most is not None else ""))]


class StalenessProbe(Probe):
    """Delays the engine's weight syncs to every max_staleness + 1 rollout batches, and logs the lag."""

    rollout_layouts: ClassVar[dict[str, Layout]] = {ENGINE_VERSION: ROW, ENGINE_STALENESS: ROW}
    runs_after = (RoutingProbe,)  # an update's flip rates are in when on_loss reads them
    runs_before = (PerfProbe,)  # PerfProbe's weight_sync phase then times only the syncs that run

    def __init__(self, config: StalenessSettings) -> None:
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
        line = f"  engine   max_staleness {describe_staleness(self.config.max_staleness)}"
        return [LinePart(BANNER_GSPO + 12, line)]

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        return stale_line_parts(logs)

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
