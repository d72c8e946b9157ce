"""The one place where GSPO's defaults live, and the algorithm presets built on them.

TRL's own defaults (`loss_type="dapo"`, `epsilon=0.2`, on-policy updates) silently turn a
"GSPO" run into something else, so a recipe starts from these instead. Values are the GSPO
paper's (Zheng et al. 2025, arXiv 2507.18071): one sequence-level ratio per response,
clipped to [1 - 3e-4, 1 + 4e-4], averaged per response then over responses, no KL term,
and each rollout batch split into 4 minibatch updates of which the last 3 are off-policy.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

GSPO_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {
        "importance_sampling_level": "sequence",
        "loss_type": "grpo",  # mean over tokens within a response, then over responses
        "beta": 0.0,
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
        "steps_per_generation": 4,  # 4 minibatch updates per rollout batch...
        "gradient_accumulation_steps": 1,  # ...each one optimizer step
        # Off: no reweighting for the vLLM engine/trainer log-prob gap, as in the paper, whose
        # length-normalised s_i tolerates engine noise (its clip bounds the effect). TRL's default
        # (sequence_mask, C_max 3) weights by exp(SUM of token log-ratios), not GSPO's mean: a
        # systematic 1e-3 nats/token gap zeroes every response longer than ~1100 tokens, a length
        # bias. Measure the gap with `gspo-trl check-logprobs`; if it is large, use engine.correction
        # (one length-normalised weight per response, docs/engine-logprobs.md) or TRL's
        # vllm_importance_sampling_mode: token_truncate (length-neutral), not its sequence modes.
        "vllm_importance_sampling_correction": False,
    }
)

ALGORITHMS: MappingProxyType[str, MappingProxyType[str, Any]] = MappingProxyType(
    {
        # GSPO as in the paper.
        "gspo": GSPO_DEFAULTS,
        # GSPO-token: the same sequence ratio's value and clip decision on every token, with the
        # gradient flowing per token so advantages can differ per token. TRL computes it on the
        # token path; GSPOTrainer supplies the stop-gradient trick (see gspo_trl.training.trainer).
        "gspo_token": MappingProxyType({**GSPO_DEFAULTS, "importance_sampling_level": "token"}),
        # Token-level GRPO with the paper's comparison clip range, for side-by-side runs.
        "grpo": MappingProxyType(
            {**GSPO_DEFAULTS, "importance_sampling_level": "token", "epsilon": 0.2, "epsilon_high": 0.27}
        ),
    }
)

TOKEN_SUM_LOSSES = frozenset({"dapo", "bnpo", "dr_grpo", "cispo"})
"""Loss aggregations that sum over tokens: they weight responses by length, which is wrong for
a sequence-level ratio (docs/gspo.md, "Loss aggregation")."""

EPSILON_CLIP_LOSSES = frozenset({"grpo", "bnpo", "dr_grpo", "dapo", "luspo"})
"""Loss types where `epsilon` / `epsilon_high` are clip half-widths around a ratio of 1."""

LORA_LEARNING_RATE_FACTOR = 10
"""LoRA's usual learning rate against full fine-tuning's (the shipped Qwen3-4B recipes: 1e-6 full,
1e-5 LoRA): `plan`'s LoRA fix comes with a `--learning_rate` this much higher, and `validate`
warns about LoRA at a full fine-tuning rate."""
