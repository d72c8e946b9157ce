"""Each reward of a run, visible: its mean on the step line, and an alarm when one stops varying.

TRL logs every reward function's mean and spread over a rollout batch's completions
(`rewards/{name}/mean`, `rewards/{name}/std`, gspo_trl.core.metric_names.trl_reward). The step line
shows only the weighted total, so a reward stuck at 0.0 (a length cap it never reaches, a
column it reads in the wrong format) can sit there for a whole run unnoticed while the others
train. The console shows the means compactly (`[math 0.50 format 0.00]`) when there are two or
more rewards, and warns once per reward whose spread is 0 (every completion scored the same)
for CONSTANT_REWARD_ROLLOUTS logged rollout batches in a row: it adds nothing to any advantage.
With one reward the zero-variance alarm already says so (every group ties).
"""

from __future__ import annotations

import math
from typing import Any

import gspo_trl.core.metric_names as names

CONSTANT_REWARD_ROLLOUTS = 3
"""Logged rollout batches in a row in which a reward scored every completion alike before the alarm."""


def reward_means_part(logs: dict[str, Any]) -> str | None:
    """`[math 0.50 format 0.00]` from the event's `rewards/{name}/mean` keys; None for fewer than two."""
    means = names.trl_reward_stats(logs, "mean")
    if len(means) < 2:
        return None
    return "[" + " ".join(f"{name} {_mean(value)}" for name, value in means.items()) + "]"


def _mean(value: Any) -> str:
    """A reward's logged mean; 'n/a' for the None (or NaN) TRL logs when the reward returned None
    for every completion of the window (TRL's multi-task pattern: another reward judges them)."""
    return f"{value:.2f}" if isinstance(value, int | float) and not math.isnan(value) else "n/a"


class ConstantRewardWatch:
    """Counts, per reward, the logged rollout batches in a row where it scored every completion alike."""

    def __init__(self, rollouts: int = CONSTANT_REWARD_ROLLOUTS) -> None:
        self.rollouts = rollouts
        self.streaks: dict[str, int] = {}
        self.warned: set[str] = set()

    def update(self, logs: dict[str, Any]) -> list[str]:
        """The alarms this log event raises (none for events without per-reward keys)."""
        spreads = names.trl_reward_stats(logs, "std")
        if len(spreads) < 2:
            return []
        means = names.trl_reward_stats(logs, "mean")
        alarms = []
        for name, spread in spreads.items():
            constant = isinstance(spread, int | float) and not math.isnan(spread) and spread == 0
            self.streaks[name] = self.streaks.get(name, 0) + 1 if constant else 0
            if self.streaks[name] >= self.rollouts and name not in self.warned:
                self.warned.add(name)
                alarms.append(
                    f"reward {name!r} scored every completion {means.get(name, float('nan')):.3g} for "
                    f"{self.rollouts} rollout batches in a row: it adds nothing to the advantages. "
                    "Check its parameters against the run (e.g. a length limit the completions never "
                    "reach) and the data columns it reads (`gspo-trl rewards list`)."
                )
        return alarms
