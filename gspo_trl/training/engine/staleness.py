"""`engine.max_staleness` in a run: when the engine's weights are synced, and how old each row is.

With d = max_staleness the engine is synced at rollout batch r only when r % (d + 1) == 0, so a
row is 0 to d rollout batches stale (d / 2 on average). r counts the training rollouts that begin
at a new optimizer step. A resumed run keeps the uninterrupted run's sync points and also syncs its
first rollout batch (its engine holds other weights); eval rollouts and held-out scoring always
sync, since they must score the current policy.

Each row is tagged in TRL's rollout dict: ENGINE_VERSION, the optimizer step whose weights sampled
it, and ENGINE_STALENESS, how many rollout batches older those weights are than the rollout's own.
The schedule, the counting of r and the decoupled objective: docs/engine-logprobs.md ("Stale
engine weights").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import gspo_trl.core.metric_names as names

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


def describe(max_staleness: int) -> str:
    """One line for the banner and the log: the schedule in words."""
    d = max_staleness
    return (
        f"{d}: the engine's weights synced every {d + 1} rollout batches, so rollouts are sampled "
        f"0 to {d} rollout batches stale; w_i = pi_old / mu corrects the gap under engine.correction"
    )
