"""The `engine:` section: when the inference engine's log-probs may stand in for pi_old.

Shared by recipes (gspo_trl.config.validation) and `GSPOConfig`; docs/engine-logprobs.md
says when this is safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
