"""The plan's synchronous vs overlapped step time: G + T against max(G, T), pinned on the 8B recipe.

The 8B recipe trains on one node and serves rollouts from a second (vLLM server, TP 2 x DP 4):
the topology where generating batch k+1 while training on batch k can hide the shorter of the
two. A colocated recipe shares its GPUs, so there the plan prints no overlap.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.shipped import find_shipped
from gspo_trl.plan.model_shape import load_model_shape
from gspo_trl.plan.overlap import StepTime, format_step_time, step_time
from gspo_trl.plan.recipe_plan import plan_recipe
from gspo_trl.plan.topology import resolve_topology
from gspo_trl.plan.vllm_memory import GIB

SERVER_RECIPE = "qwen3-8b/math"
COLOCATED_RECIPE = "qwen3-1.7b/math"


def recipe_plan(name: str):
    recipe = load_recipe(find_shipped(name))
    return plan_recipe(recipe, resolve_topology(recipe.training, recipe.launch))


def test_8b_generation_is_the_server_replicas_decode_floor_by_hand():
    """Qwen3-8B (36 layers, 8 KV heads of 128) on H100 80 GB at vllm-serve's 0.9: TP 2 x DP 4, so
    each replica decodes 512 / 4 = 128 sequences of 512 + 8192 tokens, as many at once as its KV
    cache holds, each decode step reading the weights once and every cached K/V."""
    result = recipe_plan(SERVER_RECIPE)
    step, setup = result.step, result.plan.setup
    shape = load_model_shape("Qwen/Qwen3-8B")
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim) == (36, 8, 128)
    assert (step.server.tensor_parallel, step.server.data_parallel) == (2, 4)
    assert step.server.sequences_per_replica == 128
    weights_per_gpu = shape.total_params * 2 / 2
    kv_per_token = 2 * 36 * (8 // 2) * 128 * 2
    kv_room = int(0.9 * setup.gpu_memory_gib * GIB) - shape.total_params * 2 // 2 - GIB
    fitting = (kv_room // kv_per_token) // (512 + 8192)
    assert step.server.concurrent == min(128, fitting) < 128  # two waves
    steps = 8192
    per_wave = steps * weights_per_gpu + fitting * kv_per_token * (512 * steps + steps * (steps + 1) / 2)
    assert step.generation == pytest.approx(math.ceil(128 / fitting) * per_wave / 3.35e12)


def test_8b_training_is_the_whole_runs_per_batch_parts():
    """T is the run-time table's pi_old forward + reference forward + policy updates, per batch."""
    result = recipe_plan(SERVER_RECIPE)
    parts = {part.name: part.seconds_each for part in result.run.parts}
    expected = parts["pi_old log-prob forward"] + parts["reference forward"] + parts["policy updates"]
    assert result.step.training == pytest.approx(expected)
    assert result.step.training == pytest.approx(result.plan.throughput.compute_seconds)


def test_8b_synchronous_is_the_sum_and_overlapped_the_max():
    step = recipe_plan(SERVER_RECIPE).step
    g, t = step.generation, step.training
    assert step.separate_engine
    assert step.synchronous == pytest.approx(g + t)
    assert step.overlapped == pytest.approx(max(g, t)) and g > t  # generation-bound: T is hidden
    assert step.speedup == pytest.approx((g + t) / g)
    assert 1 < step.speedup < 2


@pytest.mark.parametrize(
    ("generation", "training", "overlapped", "speedup"),
    [(100.0, 100.0, 100.0, 2.0), (300.0, 100.0, 300.0, 4 / 3), (50.0, 150.0, 150.0, 4 / 3)],
)
def test_overlap_hides_the_shorter_side_at_most_halving_the_step(generation, training, overlapped, speedup):
    step = StepTime(generation, training, 0.0, 0.0, training, 4.0, separate_engine=True)
    assert step.overlapped == overlapped and step.speedup == pytest.approx(speedup)
    colocated = dataclasses.replace(step, separate_engine=False)
    assert colocated.overlapped == colocated.synchronous == generation + training
    assert colocated.speedup == 1


def test_a_colocated_recipe_gets_no_overlap():
    step = recipe_plan(COLOCATED_RECIPE).step
    assert not step.separate_engine and step.server is None
    assert step.generation == recipe_plan(COLOCATED_RECIPE).plan.throughput.generation_seconds
    assert step.overlapped == step.synchronous


def test_plan_prints_the_terms_and_the_formula(capsys):
    assert gspo_trl_main(["plan", SERVER_RECIPE]) == 0
    out = capsys.readouterr().out
    step = recipe_plan(SERVER_RECIPE).step
    g, t = f"{step.generation:.1f}", f"{step.training:.1f}"
    assert f"G + T = {g} + {t} = {step.synchronous:.1f} s" in out
    assert f"max(G, T) = max({g}, {t}) = {step.overlapped:.1f} s" in out
    assert f"speedup        {step.speedup:.2f}x" in out
    assert "4 replica(s) x TP 2" in out and "128 sequences per replica" in out
    assert gspo_trl_main(["plan", COLOCATED_RECIPE]) == 0
    assert "overlapped     = synchronous: the engine shares the training GPUs" in capsys.readouterr().out


def test_without_the_server_layout_tp_1_and_a_replica_per_gpu_are_assumed_and_said():
    plan = recipe_plan(SERVER_RECIPE).plan
    step = step_time(plan.shape, plan.setup, plan.throughput)
    assert (step.server.tensor_parallel, step.server.data_parallel) == (1, 8)
    assert step.server.sequences_per_replica == 512 // 8
    assert "assumed TP 1" in step.server.source and "DP assumed" in step.server.source
    assert "assumed TP 1" in "\n".join(format_step_time(step))
