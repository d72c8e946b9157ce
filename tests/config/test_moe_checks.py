"""The `moe:` section's refusals: each names the key and the fix, from a recipe and from GSPOConfig."""

from __future__ import annotations

import json

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.config import GSPOConfig

TINY_RECIPE = "tiny/reversal"

REFUSED = [
    ({"moe": {"routing_replay": "sometimes"}}, r"moe.routing_replay must be one of off, old, engine"),
    ({"moe": {"routing_replay": "old"}, "engine": {"old_logprobs": "engine"}, "use_vllm": True}, r"skips"),
    (
        {"moe": {"routing_replay": "old"}, "steps_per_generation": 1, "allow_on_policy": True},
        r"every update is on-policy",
    ),
    ({"moe": {"routing_replay": "engine"}}, r"set use_vllm: true"),
    (
        {"moe": {"routing_replay": "engine"}, "use_vllm": True, "vllm_mode": "server"},
        r"needs vllm_mode: colocate",
    ),
    ({"moe": {"routing_replay": "old"}, "model": {"name_or_path": "tiny"}}, r"dense model"),
    (
        {"moe": {"routing_replay": "engine"}, "use_vllm": True, "vllm_tensor_parallel_size": 2},
        r"engine with vllm_tensor_parallel_size 2: vLLM 0.31 returns the experts only on each",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), REFUSED)
def test_validate_refuses_routing_replay_that_cannot_hold(tmp_path, overrides, message):
    moe_model = tmp_path / "moe"
    moe_model.mkdir()
    (moe_model / "config.json").write_text(json.dumps({"num_experts": 8}))
    content = {"model": {"name_or_path": str(moe_model)}, **overrides}
    recipe = load_recipe(TINY_RECIPE, content, partial=True)
    with pytest.raises(RecipeError, match=message) as refused:
        validate(recipe, processes=1)
    assert len(getattr(refused.value, "lines", [refused.value])) == 1  # this one, once


def test_a_moe_model_passes_and_a_local_dense_one_is_refused(tmp_path):
    for name, config in (("moe", {"num_experts": 8}), ("dense", {"hidden_size": 64})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    replay = {"moe": {"routing_replay": "old"}}
    validate(
        load_recipe(TINY_RECIPE, {"model": {"name_or_path": str(tmp_path / "moe")}, **replay}), processes=1
    )
    dense = load_recipe(
        TINY_RECIPE, {"model": {"name_or_path": str(tmp_path / "dense")}, **replay}, partial=True
    )
    with pytest.raises(RecipeError, match=r"moe.routing_replay: old: .* is a dense model"):
        validate(dense, processes=1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"moe": {"routing_replay": "engine"}}, r"set use_vllm: true"),
        (
            {"moe": {"routing_replay": "engine"}, "use_vllm": True, "vllm_tensor_parallel_size": 2},
            r"tensor-parallel group's first rank",
        ),
        (
            {"moe": {"routing_replay": "old"}, "steps_per_generation": 1, "allow_on_policy": True},
            r"on-policy",
        ),
    ],
)
def test_gspo_config_refuses_the_same(tmp_path, fields, message):
    with pytest.raises(RecipeError, match=message):
        GSPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **fields)
