"""GSPO's choice for TRL's vLLM importance-sampling correction, and the line that reports it.

TRL 1.16 turns the correction on by default (sequence_mask, C_max 3): every vLLM run would be
reweighted by exp(summed token log-ratios). GSPO_DEFAULTS turns it off (reason in
gspo_trl/config/defaults.py); a recipe can still turn it on, and the trainer says which at start.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.shipped import RECIPES_DIR
from gspo_trl.training.build import gspo_config
from gspo_trl.training.probes.old_logprobs import vllm_correction_summary


@pytest.mark.parametrize(
    ("recipe", "overrides", "expected"),
    [
        ("qwen3-4b/math.yaml", {}, False),  # colocate
        ("qwen3-8b/math.yaml", {}, False),  # server
        ("qwen3-4b/math.yaml", {"vllm_importance_sampling_correction": True}, True),
    ],
)
def test_vllm_recipes_run_gspo_without_trl_reweighting_unless_asked(recipe, overrides, expected) -> None:
    config = gspo_config(load_recipe(RECIPES_DIR / recipe, overrides))
    assert config.use_vllm
    assert config.vllm_importance_sampling_correction is expected


@pytest.mark.parametrize(
    ("correction", "mode", "low", "high", "words"),
    [
        (False, "sequence_mask", None, 3.0, ["off", "check-logprobs"]),
        (True, "sequence_mask", None, 3.0, ["on", "sequence_mask", "[-inf, 3.0]"]),
        (True, "token_truncate", 0.5, 2.0, ["on", "token_truncate", "[0.5, 2.0]"]),
    ],
)
def test_the_start_line_names_the_active_setting(correction, mode, low, high, words) -> None:
    args = SimpleNamespace(
        vllm_importance_sampling_correction=correction,
        vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_min=low,
        vllm_importance_sampling_clip_max=high,
    )
    line = vllm_correction_summary(args)
    assert all(word in line for word in words), line
