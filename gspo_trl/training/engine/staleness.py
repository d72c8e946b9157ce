"""`engine.max_staleness` in a run: when the engine's weights are synced, and how old each row is.

With d = max_staleness, the engine is synced at rollout batch r only when r % (d + 1) == 0, so
rollout batch r samples with the weights of rollout batch r - (r % (d + 1)): staleness 0, 1, ..., d,
0, 1, ... rollout batches. That is the engine of an asynchronous pipeline whose trainer hands the
engine new weights every d + 1 rollout batches: staleness is bounded by d and averages d / 2. A
pipeline that keeps a constant lag (every batch exactly d old) is the other schedule of depth d,
not this one (its engine would need d past copies of the weights).

r counts training rollout batches from step 0: `steps_done * gradient_accumulation_steps //
micro_batches` at the process's first rollout, then +1 per rollout. A resumed run keeps the
schedule's sync points (r % (d + 1) == 0, as uninterrupted), and also syncs its first rollout
batch: its engine was built from the base model (or a server holds what another process pushed),
not from the version the schedule wants, so that batch is sampled fresh and logged with the
staleness it really has (0). Eval rollouts keep the engine's weights and are not counted.

Each row is tagged in TRL's rollout dict: ENGINE_VERSION, the optimizer step whose weights sampled
it, and ENGINE_STALENESS, how many rollout batches older those weights are than the rollout's own.
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
        self.engine: tuple[int, int] | None = None
        """(rollout, step) of the engine's last sync by this process (rollout -1: an eval's); None:
        the weights the engine was built with."""
        self._first = False
        self.history: list[RolloutVersion] = []
        """Every training rollout batch of this process, in order (tests and benchmarks read it)."""

    def begin_rollout(self, global_step: int, training: bool) -> None:
        self.training = training
        if not training:
            return
        self._first = self.rollout is None
        if self._first:
            self.rollout = global_step * self.gradient_accumulation_steps // self.micro_batches
        else:
            self.rollout += 1
        self.step = global_step

    def sync_due(self) -> bool:
        """Sync now? At the schedule's rollouts, at this process's first training rollout, and
        whenever the engine holds none of this process's versions."""
        if self.engine is None:
            return True
        return self.training and (self._first or self.rollout % (self.max_staleness + 1) == 0)

    def synced(self, global_step: int) -> None:
        rollout = self.rollout if self.training and self.rollout is not None else -1
        self.engine = (rollout, global_step)

    def current(self) -> RolloutVersion:
        """The training rollout batch being generated, with the engine's version."""
        engine_rollout, engine_step = self.engine
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
