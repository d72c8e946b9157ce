"""The plan's held-out section is the run's held-out evaluation: same engine, shards, batches, samples.

The plan and the run share gspo_trl.training.heldout.layout (engine, shards, samples per row) and
gspo_trl.eval.batching (the token-bounded HF batch); these tests pin what the plan prints for the
shipped recipes to those functions, and check the precision rule the plan applies is build.py's.
"""

from __future__ import annotations

import math

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.shipped import find_shipped
from gspo_trl.plan.recipe_plan import plan_recipe
from gspo_trl.plan.topology import resolve_topology
from gspo_trl.training.heldout.layout import HF, HF_LOCKSTEP, VLLM_COLOCATE, heldout_layout, heldout_passes

GIB = 2**30


def recipe_plan(name: str, config: str | None = None, overrides=()):
    recipe = load_recipe(find_shipped(name), overrides)
    return plan_recipe(recipe, resolve_topology(recipe.training, recipe.launch, config))


@pytest.mark.parametrize(
    ("colocated", "tp", "processes", "collective", "engine", "shards"),
    [
        (True, 1, 8, False, VLLM_COLOCATE, 8),
        (True, 2, 8, True, VLLM_COLOCATE, 4),  # one shard per tensor-parallel group
        (False, 1, 8, False, HF, 8),
        (False, 1, 8, True, HF_LOCKSTEP, 1),  # FSDP / ZeRO-3 without the gather: every rank, every row
        (False, 1, 1, True, HF, 1),
    ],
)
def test_heldout_layout(colocated, tp, processes, collective, engine, shards):
    layout = heldout_layout(colocated, tp, processes, collective)
    assert (layout.engine, layout.num_shards) == (engine, shards)


def test_colocated_recipe_evaluates_inside_the_vllm_reservation_with_its_samples():
    result = recipe_plan("qwen3-1.7b/math")  # zero2 x 8, vLLM colocate, 256 rows, num_samples 4
    load = result.heldout
    section = result.recipe.heldout
    score, _ = heldout_passes(1.0, section.num_samples, section.k, section.sample_temperature)
    assert (load.engine, load.num_shards, load.rows_per_shard) == (VLLM_COLOCATE, 8, 32)
    assert (load.score_samples, load.sampled_samples) == (score[0], 0) == (4, 0)
    assert load.tokens == 32 * 4 * 8192
    state = sum(t.bytes for t in result.plan.terms if t.phase == "state")
    asleep = sum(t.bytes for t in result.plan.terms if t.name.startswith("vLLM") and t.phase == "state")
    assert load.peak_bytes == state - asleep + result.plan.vllm.reserved_bytes  # its resident part once


def test_hf_heldout_batch_is_bounded_by_max_batch_tokens():
    result = recipe_plan("qwen3-1.7b/math", overrides=["--use_vllm", "false"])
    load, setup = result.heldout, result.plan.setup
    assert (load.engine, load.num_shards) == (HF, 8)
    rows = load.max_batch_tokens // setup.sequence_length  # one prompt length for every row
    assert load.batch_rows == rows == 65536 // 8704 == 7
    assert load.kv_peak_bytes == rows * setup.sequence_length * result.plan.shape.kv_bytes_per_token(2)


def test_ddp_recipe_plans_fp32_weights_as_build_loads_them():
    """build.py loads bfloat16 as float32 without DeepSpeed or LoRA; the plan counts it so."""
    result = recipe_plan("qwen3-1.7b/math", "configs/ddp.yaml")
    setup, shape = result.plan.setup, result.plan.shape
    assert setup.train_weights_dtype == "float32"
    weights = next(t for t in result.plan.terms if t.name == "weights")
    assert weights.bytes == shape.total_params * 4
    rollout = sum(t.bytes for t in result.plan.terms if t.phase in ("state", "rollout"))
    assert math.isclose(rollout / GIB, 73.65, abs_tol=0.1)  # issue 19: 74 GiB of fp32 state (80 GiB then)
    zero2 = recipe_plan("qwen3-1.7b/math")
    assert zero2.plan.setup.train_weights_dtype == "bfloat16"
