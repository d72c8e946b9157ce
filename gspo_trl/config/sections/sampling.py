"""The `sampling:` section: dynamic sampling (DAPO's), off by default. With `dynamic: true` a
rollout batch's groups whose rewards all tie (zero advantage: GSPO learns nothing from them) are
dropped and more prompts are generated and scored in their place, up to `max_rounds` generation
rounds per rollout batch (gspo_trl.training.probes.dynamic_sampling; docs/dynamic-sampling.md says
when it pays). The dataclass refuses bad values when built; `check_sampling_settings` checks it
against the run's other settings. Shared by recipes (gspo_trl.config.validation) and `GSPOConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gspo_trl.core.errors import RecipeError

MAX_ROUNDS = 32
"""The most generation rounds one rollout batch may take. Each round generates a whole generation
batch; docs/dynamic-sampling.md measured 2.3-2.9x the generated tokens at the default 3, and a task
the model always fails (or always solves) runs every round, so a larger cap only buys minutes of
generation with no update and no console line (verl's own cap, `max_num_gen_batches`, stops the run)."""


@dataclass
class SamplingConfig:
    """Recipe `sampling:` section.

    dynamic: drop the groups whose rewards all tie and refill the rollout batch with groups of
        freshly drawn prompts (their own generation and scoring), so every update holds the
        full number of groups that teach something.
    max_rounds: generation rounds per rollout batch, the first included (verl's
        `max_num_gen_batches`). At the cap a batch still short is filled by repeating the
        informative groups it has; one with none is trained as generated (all advantages 0).
    warn_capped_batches: consecutive rollout batches that reach the cap short before the console
        warns (the data is too easy or too hard for the model: `gspo-trl filter`).
    """

    dynamic: bool = False
    max_rounds: int = 3
    warn_capped_batches: int = 3

    def __post_init__(self) -> None:
        if not _whole(self.max_rounds) or not 1 <= self.max_rounds <= MAX_ROUNDS:
            raise RecipeError(
                f"sampling.max_rounds must be a whole number of generation rounds from 1 (no refill) to "
                f"{MAX_ROUNDS}, got {self.max_rounds!r}; data whose groups mostly tie needs filtering "
                "(`gspo-trl filter`), not more rounds"
            )
        if not _whole(self.warn_capped_batches) or self.warn_capped_batches < 1:
            raise RecipeError(
                f"sampling.warn_capped_batches must be >= 1 (a whole number of rollout batches), "
                f"got {self.warn_capped_batches!r}"
            )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_sampling_settings(config: SamplingConfig, training: Mapping[str, Any]) -> None:
    """`sampling:` against the GRPOConfig fields it depends on (`training`)."""
    if not config.dynamic:
        return
    aggregation = training.get("multi_objective_aggregation", "sum_then_normalize")
    if aggregation != "sum_then_normalize":
        raise RecipeError(
            f"sampling.dynamic drops the groups whose summed reward ties (their advantages are 0), "
            f"but multi_objective_aggregation: {aggregation} normalises over the whole batch, where "
            "such groups still get an advantage; use sum_then_normalize or turn sampling.dynamic off"
        )
