"""The `moe:` section: which routing replay a run can hold (docs/moe.md).

Shared by recipes (gspo_trl.config.validation) and `GSPOConfig`. A dense model is refused here
when its config.json is on disk (the tiny CPU model always is); otherwise the trainer refuses
it when the model has loaded and no router was found (gspo_trl.training.routing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gspo_trl.config.engine_checks import expert_count, local_model_config
from gspo_trl.config.fields import build_dataclass
from gspo_trl.config.sections import TINY, EngineConfig, MoeConfig
from gspo_trl.errors import RecipeError


def check_moe_settings(
    moe: Mapping[str, Any], training: Mapping[str, Any], engine: Mapping[str, Any], on_policy: bool
) -> MoeConfig:
    """The `moe:` section, checked against the settings it depends on (`on_policy`: every update
    sees the current policy, gspo_trl.config.batch.RolloutBatch.on_policy)."""
    config = build_dataclass(MoeConfig, dict(moe), "moe")
    mode = config.routing_replay
    if mode == "old" and build_dataclass(EngineConfig, dict(engine), "engine").from_engine:
        raise RecipeError(
            "moe.routing_replay: old records the experts in the trainer's pi_old forward, which "
            "engine.old_logprobs: engine skips; use routing_replay: engine (the experts vLLM chose) "
            "or old_logprobs: trainer"
        )

    if config.replays and on_policy:
        raise RecipeError(
            f"moe.routing_replay: {mode}: every update is on-policy, so TRL runs no pi_old forward to "
            "record or replay in and each update's own routing already is pi_old's; use several minibatch "
            "updates per rollout batch (steps_per_generation: 4) or routing_replay: off"
        )
    if mode == "engine" and not training.get("use_vllm"):
        raise RecipeError(
            "moe.routing_replay: engine replays the experts vLLM chose while sampling; set use_vllm: true "
            "or use routing_replay: old"
        )
    if mode == "engine" and training.get("vllm_mode") == "server":
        raise RecipeError(
            "moe.routing_replay: engine needs vllm_mode: colocate: TRL's server client returns token ids "
            "and log-probs only, not the experts vLLM routed to (docs/moe-engine-routing.md)"
        )
    return config


def check_moe_model(model: str, moe: Mapping[str, Any]) -> None:
    """Refuse routing replay for a model known to be dense (config.json on disk, or `tiny`)."""
    config = build_dataclass(MoeConfig, dict(moe), "moe")
    if not config.replays:
        return
    model_config = {} if model == TINY else local_model_config(model)
    if model_config is None or expert_count(model_config) > 0:
        return
    raise RecipeError(
        f"moe.routing_replay: {config.routing_replay}: {model!r} is a dense model (its config.json names no "
        "experts), so it has no routing to replay; remove the moe: section"
    )
