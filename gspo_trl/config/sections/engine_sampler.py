"""The `engine:` keys that meet the sampler: which top_p/top_k/min_p/repetition_penalty settings
reshape what vLLM samples from, and what may consume the engine's log-probs under them.

With such a setting vLLM samples from, and reports log-probs of (`processed_logprobs`), the
filtered, renormalised distribution: each sampled token's log mu is higher by -log S_t, S_t the
probability mass the filter kept. The trainer scores the plain softmax of logits / temperature, so
anything that compares the two (pi_old = mu, engine.correction's w_i) measures the filter,
not the engine. `engine.sampling_masks: replay` renormalises over the kept set
(gspo_trl.training.probes.sampling_masks); without it those combinations are refused here, and
TRL's `vllm_importance_sampling_correction` always (replay runs after TRL computed its ratio).
Shared by recipes and `GSPOConfig` through `check_engine_settings`; docs/engine-logprobs.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gspo_trl.config.sections.engine_correction import TRL_CORRECTION_KEY
from gspo_trl.core.errors import RecipeError

SAMPLING_NEUTRAL = {
    "top_p": (1.0, None),
    "top_k": (0, -1, None),  # no top-k: TRL `default=0,` (trl/trainer/grpo_config.py:544), vLLM 0 or -1
    "min_p": (0.0, None),
    "repetition_penalty": (1.0, None),
}
"""Generation settings and the values that leave the sampler alone. Any other value makes vLLM
sample from (and report log-probs of) a reshaped distribution."""

SAMPLING_MASK_MODES = ("off", "replay")
"""`engine.sampling_masks`: off, or replay the sampler's top-k/top-p/min-p filter on the trainer's
logits and renormalise over the kept set wherever the engine's log-probs meet the trainer's."""

REPLAYABLE = ("top_p", "top_k", "min_p")
"""The filters replay reproduces; a repetition penalty changes the logits themselves, per history."""

RESET = "top_p: 1.0, top_k: 0, min_p: null, repetition_penalty: 1.0"


@dataclass(frozen=True)
class SamplingMaskSettings:
    """What SamplingMaskProbe reads (`EngineConfig.sampling_mask_settings()`)."""

    sampling_masks: str
    """`off` or `replay` (SAMPLING_MASK_MODES)."""


def sampler_settings(training: Mapping[str, Any]) -> dict[str, Any]:
    """The sampler's top_p/top_k/min_p/repetition_penalty as vLLM gets them: `generation_kwargs`
    overrides the GRPOConfig fields (TRL: `generation_kwargs.update(self.generation_kwargs)`,
    trl/generation/vllm_generation.py:672)."""
    extra = training.get("generation_kwargs") or {}
    if isinstance(extra, str):  # GRPOConfig accepts a JSON string
        try:
            extra = json.loads(extra)
        except ValueError:
            extra = {}
    return {key: extra.get(key, training.get(key)) for key in SAMPLING_NEUTRAL}


def reshaping_settings(training: Mapping[str, Any]) -> dict[str, Any]:
    """The sampler settings that reshape what vLLM samples from (empty: the plain softmax)."""
    return {k: v for k, v in sampler_settings(training).items() if v not in SAMPLING_NEUTRAL[k]}


def describe_sampler(training: Mapping[str, Any]) -> str:
    """`top_p=0.8, top_k=20` (the reshaping settings), or `plain softmax` when none reshapes."""
    changed = reshaping_settings(training)
    return ", ".join(f"{k}={v!r}" for k, v in changed.items()) or "plain softmax"


def check_sampler_settings(config: Any, training: Mapping[str, Any]) -> None:
    """Refuse, in one line naming the keys, a consumer of the engine's log-probs under a reshaping
    sampler without replay, and a replay that cannot act."""
    mode = config.sampling_masks
    if mode not in SAMPLING_MASK_MODES:
        raise RecipeError(
            f"engine.sampling_masks must be one of {', '.join(SAMPLING_MASK_MODES)}, got {mode!r}"
        )
    changed = reshaping_settings(training)
    named = ", ".join(f"{k}={v!r}" for k, v in changed.items())
    # TRL's own ratio exp(pi_old - mu) is taken in its rollout, before any probe sees the batch:
    # `(old_per_token_logps - sampling_per_token_logps) * mask` (trl/trainer/grpo_trainer.py:2662)
    if changed and training.get("use_vllm") and training.get(TRL_CORRECTION_KEY):
        raise RecipeError(
            f"{TRL_CORRECTION_KEY}: true with {named}: TRL weighs the loss by exp(pi_old - mu), mu "
            "vLLM's log-probs of the filtered distribution (each higher by -log S_t), inside its rollout, "
            "before engine.sampling_masks: replay can renormalise them, so it measures the filter. Set "
            f"{TRL_CORRECTION_KEY}: false (the GSPO default; engine.correction with engine.sampling_masks: "
            f"replay corrects) or reset those keys ({RESET})."
        )
    if mode == "replay":
        if not training.get("use_vllm"):
            raise RecipeError(
                "engine.sampling_masks: replay renormalises the vLLM engine's log-probs over the set its "
                "sampler kept; set use_vllm: true or engine.sampling_masks: off"
            )
        if not changed:
            raise RecipeError(
                "engine.sampling_masks: replay with a plain sampler (top_p 1, top_k 0, no min_p) has no "
                "kept set to replay; set top_p, top_k or min_p, or engine.sampling_masks: off"
            )
        if "repetition_penalty" in changed:
            raise RecipeError(
                f"engine.sampling_masks: replay with repetition_penalty={changed['repetition_penalty']!r}: a "
                "penalty rescales each token's logit by its history, which replaying the kept set does not "
                "reproduce; set repetition_penalty: 1.0 or engine.sampling_masks: off"
            )
        return
    if not changed:
        return
    if config.old_logprobs == "engine":
        raise RecipeError(
            f"engine.old_logprobs: engine with {named}: vLLM then reports log-probs of the "
            "truncated/penalised distribution it sampled from, while the trainer's ratio uses the plain "
            "softmax of logits / temperature, so every s_i would be biased. Set engine.sampling_masks: "
            f"replay (top_p/top_k/min_p), reset those keys ({RESET}) or use old_logprobs: trainer."
        )
    if config.correction != "off":
        raise RecipeError(
            f"engine.correction: {config.correction} with {named}: vLLM reports log-probs of the filtered "
            "distribution it sampled from (each higher by -log S_t, S_t the kept mass), so w_i would "
            "measure the filter, not the engine. Set engine.sampling_masks: replay (top_p/top_k/min_p), "
            f"reset those keys ({RESET}) or engine.correction: off."
        )
