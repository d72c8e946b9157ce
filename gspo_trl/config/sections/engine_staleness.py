"""The `engine:` section's `max_staleness`: which runs can sample from stale engine weights.

Shared by recipes and `GSPOConfig` through `check_engine_settings`; the schedule itself is
gspo_trl.training.probes.staleness, docs/engine-logprobs.md "Stale engine weights" the why.
Each refusal is one line naming the keys that cannot go together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gspo_trl.config.sections.engine_correction import THRESHOLD_KEYS
from gspo_trl.core.errors import RecipeError


@dataclass(frozen=True)
class StalenessSettings:
    """What StalenessProbe reads (`EngineConfig.staleness_settings()`)."""

    max_staleness: int
    """d: the engine's weights are synced every d + 1 rollout batches (0: every one)."""


def describe_staleness(max_staleness: int) -> str:
    """One line for the banner and the log: the schedule in words."""
    d = max_staleness
    return (
        f"{d}: the engine's weights synced every {d + 1} rollout batches, so rollouts are sampled "
        f"0 to {d} rollout batches stale; w_i = pi_old / mu corrects the gap under engine.correction"
    )


def check_staleness_settings(config: Any, training: Mapping[str, Any]) -> None:
    """Refuse a staleness the run cannot hold: one line naming the keys."""
    d = config.max_staleness
    if d == 0:
        return
    if not training.get("use_vllm"):
        raise RecipeError(
            f"engine.max_staleness: {d} delays the vLLM engine's weight syncs; set use_vllm: true or "
            "engine.max_staleness: 0"
        )
    if config.from_engine:
        raise RecipeError(
            f"engine.max_staleness: {d} with engine.old_logprobs: engine: the stale engine's log-probs "
            "would be pi_old, so no proximal policy is left to clip against and the staleness goes "
            "uncorrected; use engine.old_logprobs: trainer or engine.max_staleness: 0"
        )
    if training.get("vllm_enable_sleep_mode"):
        raise RecipeError(
            f"engine.max_staleness: {d} with vllm_enable_sleep_mode: true: TRL re-pushes the current "
            "weights after each sleep (sleep level 2 discards the engine's), so the engine cannot keep a "
            "stale version; set vllm_enable_sleep_mode: false or engine.max_staleness: 0"
        )
    if config.corrects:
        acting = [k for k in THRESHOLD_KEYS if not (k == "weight_min" and config.correction == "truncate")]
        auto = [f"engine.{k}" for k in acting if getattr(config, k) == "auto"]
        if auto:
            raise RecipeError(
                f"engine.max_staleness: {d} with {', '.join(auto)}: auto: `auto` sets bounds from engine "
                "noise alone (a fresh rollout batch, or a check-logprobs report), so it would cut every "
                "stale response; give numbers (e.g. engine.weight_max: 2) or null"
            )
