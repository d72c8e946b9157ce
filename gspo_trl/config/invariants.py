"""GSPO's invariants: each setting that would silently not be GSPO, refused by one function.

A recipe (gspo_trl.config.validation.validate) and the Python API (`GSPOConfig.__post_init__`,
and `GSPOTrainer` for a config changed after it was built) call these same functions, so a
setting is refused with the same message whichever way it was given. Each message names the
key and the fix; docs/gspo.md ("In TRL") explains why.

`algorithm` is what the settings amount to: a recipe names it (`algorithm:`); a GSPOConfig
has it from `gspo_token` and `importance_sampling_level` (`algorithm_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gspo_trl.config.defaults import ALGORITHMS, EPSILON_CLIP_LOSSES, GSPO_DEFAULTS, TOKEN_SUM_LOSSES
from gspo_trl.core.errors import RecipeError

logger = logging.getLogger(__name__)

GSPO_ALGORITHMS = ("gspo", "gspo_token")
RATIO_LEVELS = ("token", "sequence")

TOKEN_LEVEL_CLIP = 0.05
"""Clip half-widths from this up are a token-level range, below it a sequence-level one.
Token ratios move per token (TRL's default range 0.2; the GSPO paper's GRPO 0.2 / 0.27); a
sequence ratio averages |y| token log-ratios and moves orders of magnitude less (the paper's
GSPO 3e-4 / 4e-4). Either range on the other kind of ratio clips almost nothing or almost
everything."""


def algorithm_of(importance_sampling_level: str, gspo_token: bool) -> str:
    """'gspo_token' with GSPO-token on, else 'gspo' for sequence ratios and 'grpo' for token ones."""
    if gspo_token:
        return "gspo_token"
    return "gspo" if importance_sampling_level == "sequence" else "grpo"


def _clip_range(training: Mapping[str, Any]) -> tuple[float, float]:
    """(eps_low, eps_high); epsilon_high None means epsilon, as TRL reads it (GRPOTrainer.__init__)."""
    low = training.get("epsilon", GSPO_DEFAULTS["epsilon"])
    high = training.get("epsilon_high")
    return low, low if high is None else high


def check_ratio_level(algorithm: str, level: Any, level_explicit: bool = True) -> None:
    """The ratio level must be the algorithm's: sequence for GSPO, token for GSPO-token and GRPO.

    `level_explicit` False (a recipe's level from its algorithm's defaults) accepts GRPO with
    any level; set explicitly, 'sequence' under GRPO is GSPO under the wrong name.
    """
    if level not in RATIO_LEVELS:
        raise RecipeError(f"importance_sampling_level: {level!r} is not 'token' or 'sequence'")
    if algorithm == "gspo" and level != "sequence":
        raise RecipeError(
            f"importance_sampling_level: {level!r} gives token-level ratios, i.e. GRPO, while "
            "algorithm is gspo. Remove the key, or set algorithm: grpo (or gspo_token)."
        )
    if algorithm == "gspo_token" and level != "token":
        raise RecipeError(
            f"importance_sampling_level: {level!r} with GSPO-token (algorithm: gspo_token, or "
            "GSPOConfig(gspo_token=True)): GSPO-token builds the sequence ratio on TRL's token path, "
            "so it needs 'token'. Remove the key, or set it to 'token'."
        )
    if algorithm == "grpo" and level == "sequence" and level_explicit:
        raise RecipeError("importance_sampling_level: 'sequence' is GSPO; set algorithm: gspo instead.")


def check_loss_aggregation(algorithm: str, training: Mapping[str, Any]) -> None:
    """GSPO averages over a response's tokens, then over responses: no token-sum losses."""
    loss_type = training.get("loss_type")
    if algorithm in GSPO_ALGORITHMS and loss_type in TOKEN_SUM_LOSSES:
        raise RecipeError(
            f"loss_type: {loss_type!r} sums over tokens, weighting responses by their length; "
            "GSPO averages over tokens within a response, then over responses. "
            "Use loss_type: grpo (the default here)."
        )


def check_clip_range(algorithm: str, training: Mapping[str, Any]) -> None:
    """Clip half-widths in (0, 1), and the range at the ratio's level (see TOKEN_LEVEL_CLIP).

    A token-level range on a sequence ratio is accepted with a warning (it only clips
    little); a sequence-level range on token ratios (GRPO) is refused: it clips nearly every
    token once the policy moves, so the off-policy updates do nothing.
    """
    if training.get("loss_type") not in EPSILON_CLIP_LOSSES:
        return
    for key in ("epsilon", "epsilon_high"):
        value = training.get(key)
        if value is not None and not 0 < value < 1:
            raise RecipeError(
                f"{key}: {value} must be strictly between 0 and 1 (it is a half-width around a ratio "
                "of 1; GSPO paper: epsilon 3e-4, epsilon_high 4e-4)"
            )
    low, high = _clip_range(training)
    if high < low:
        raise RecipeError(
            f"epsilon_high: {high:g} is below epsilon {low:g}: the upper half-width is the wider one "
            "(GSPO paper 3e-4 / 4e-4, DAPO's clip-higher); swap them, or set epsilon_high with epsilon "
            f"(GSPOConfig's default is GSPO's {GSPO_DEFAULTS['epsilon_high']:g}, not epsilon)"
        )
    if algorithm in GSPO_ALGORITHMS and max(low, high) >= TOKEN_LEVEL_CLIP:
        logger.warning(
            "epsilon %s / epsilon_high %s is a token-level clip range; a sequence ratio averages |y| "
            "token log-ratios and rarely moves that far, so almost nothing will be clipped. "
            "Measure with `gspo-trl calibrate` (paper: 3e-4 / 4e-4).",
            low,
            high,
        )
    if algorithm == "grpo" and max(low, high) < TOKEN_LEVEL_CLIP:
        grpo = ALGORITHMS["grpo"]
        raise RecipeError(
            f"epsilon / epsilon_high: {low:g} / {high:g} is a sequence-level clip range, but "
            "importance_sampling_level 'token' without GSPO-token is GRPO, whose per-token ratios move "
            "far more: nearly every token would be clipped. For GSPO keep importance_sampling_level "
            "'sequence'; for GSPO-token set algorithm: gspo_token (GSPOConfig: gspo_token=True); for "
            f"GRPO use a token-level range (algorithm grpo: epsilon {grpo['epsilon']:g}, "
            f"epsilon_high {grpo['epsilon_high']:g})."
        )


CISPO_MIN_CAP = 1.0
"""CISPO's `epsilon_high` is an absolute cap on the importance weight (TRL: `torch.clamp(coef_1,
max=self.epsilon_high)`, trl/trainer/grpo_trainer.py:3110; ScaleRL's recommended 5.0,
trl/trainer/grpo_config.py:187), not a half-width around 1: below 1 it caps every weight, even
an on-policy one."""


def check_cispo_cap(training: Mapping[str, Any]) -> None:
    """loss_type cispo reads epsilon_high as its cap on the weight: a GSPO half-width (4e-4)
    there scales every token's weight of ~1 down to 4e-4, silently."""
    if training.get("loss_type") != "cispo":
        return
    _, cap = _clip_range(training)
    if cap is not None and cap < CISPO_MIN_CAP:
        raise RecipeError(
            f"epsilon_high: {cap:g} with loss_type 'cispo' is CISPO's cap on the importance weight itself, "
            f"not a half-width: every weight (about 1) would be cut to {cap:g}. Set epsilon_high to CISPO's "
            "cap (ScaleRL recommends 5.0), or use loss_type 'grpo'"
        )


def check_training_invariants(
    algorithm: str, training: Mapping[str, Any], level_explicit: bool = True
) -> None:
    """Every invariant that needs only the training settings (GRPOConfig keyword arguments)."""
    check_ratio_level(algorithm, training.get("importance_sampling_level"), level_explicit)
    check_loss_aggregation(algorithm, training)
    check_clip_range(algorithm, training)
    check_cispo_cap(training)


def check_off_policy(algorithm: str, on_policy: bool, allow_on_policy: bool) -> None:
    """GSPO needs off-policy updates: when every update is on-policy (TRL's own test, in
    gspo_trl.config.batch.RolloutBatch.on_policy) s_i = 1 and GSPO is GRPO."""
    if algorithm not in GSPO_ALGORITHMS or allow_on_policy or not on_policy:
        return
    raise RecipeError(
        "steps_per_generation / gradient_accumulation_steps / num_iterations: every update is "
        "on-policy, so s_i = 1, nothing is ever clipped and GSPO is exactly GRPO. Use several "
        "minibatch updates per rollout batch (paper: steps_per_generation: 4 with "
        "gradient_accumulation_steps: 1), or set allow_on_policy: true (GSPOConfig: "
        "allow_on_policy=True) to run it anyway."
    )
