"""The `engine:` section's `overlap`: which runs may generate the next rollout batch while training.

`one_step` (gspo_trl.training.probes.overlap, docs/async.md) sends rollout batch k+1's prompts
to a `vllm_mode: server` engine right after batch k's weight sync and trains on batch k
meanwhile, so every row after the first batch is sampled one policy version old. Only a server
can generate while the trainer's process trains, and the lag needs the trainer's pi_old (the
proximal policy) for the correction to act on: each refusal is one line naming the keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gspo_trl.core.errors import RecipeError

OVERLAP_MODES = ("off", "one_step")


@dataclass(frozen=True)
class OverlapSettings:
    """What OverlapProbe reads (`EngineConfig.overlap_settings()`)."""

    overlap: str
    """`off` or `one_step`: the next rollout batch generated on the server while this one trains."""


def check_overlap_value(value: Any) -> None:
    """Refuse an unknown `engine.overlap` (the dataclass calls it when built)."""
    if value not in OVERLAP_MODES:
        raise RecipeError(f"engine.overlap must be one of {', '.join(OVERLAP_MODES)}, got {value!r}")


def check_overlap_settings(config: Any, training: Mapping[str, Any]) -> None:
    """Refuse an overlap the run cannot hold: one line naming the keys."""
    if config.overlap == "off":
        return
    if not training.get("use_vllm") or training.get("vllm_mode") != "server":
        mode = training.get("vllm_mode") if training.get("use_vllm") else "no vLLM (use_vllm: false)"
        raise RecipeError(
            f"engine.overlap: one_step generates the next rollout batch on a vLLM server while this process "
            f"trains, but the run has {mode}; set use_vllm: true and vllm_mode: server (docs/async.md), "
            "or engine.overlap: off"
        )
    if config.max_staleness:
        raise RecipeError(
            f"engine.overlap: one_step with engine.max_staleness: {config.max_staleness}: the overlap "
            "already samples every rollout batch one version old; use one of the two"
        )
    if config.from_engine:
        raise RecipeError(
            "engine.overlap: one_step with engine.old_logprobs: engine: the one-step-old engine's "
            "log-probs would be pi_old, leaving no proximal policy to clip against; use "
            "engine.old_logprobs: trainer or engine.overlap: off"
        )
