"""What a GPU holds for a plan (issue 34 item 4): the capacity CUDA reports, not the nominal size
read as GiB, and a sleeping vLLM engine's resident part counted beside the training phase."""

from __future__ import annotations

import pytest

from gspo_trl.model.sizing.gpu_rates import GPU_RATES, rates_named, usable_memory_gib
from gspo_trl.plan.planner import plan
from gspo_trl.plan.vllm_memory import ENGINE_OVERHEAD_BYTES, GIB

FOUR_K = {"per_device_train_batch_size": 8, "max_prompt_length": 512, "max_completion_length": 3584}


@pytest.mark.parametrize(
    ("gpu", "nominal", "usable"),
    [
        ("H100", 80, 79.2),  # reports ~79.2-79.6 GiB of its "80 GB": the low end
        ("H200", 141, 139.8),  # ~139.8-140.4 of "141"
        ("A100-80GB", 80, 79.2),  # not measured: the H100's share, said so
        ("H100", 40, 39.6),  # a size the row does not have: the assumed share
    ],
)
def test_usable_capacity_is_what_cuda_reports(gpu, nominal, usable):
    result = plan(FOUR_K, "Qwen/Qwen3-1.7B", strategy="zero2", gpu_memory_gb=nominal, gpu_name=gpu)
    assert result.verdict.gpu_bytes == int(usable * GIB)
    assert result.setup.gpu_memory_gib == usable
    measured = rates_named(gpu).reported_gib is not None and rates_named(gpu).memory_gb == nominal
    assert ("assumed" not in result.capacity_note) == measured, result.capacity_note


def test_every_measured_row_reports_less_than_its_nominal_size():
    for row in GPU_RATES:
        if row.reported_gib is not None:
            low, high = row.reported_gib
            assert low <= high < row.memory_gb
            assert usable_memory_gib(row.memory_gb, row)[0] == low


@pytest.mark.parametrize("sleep", [True, False])
def test_a_sleeping_engine_keeps_its_cuda_graphs_through_training(sleep):
    """vLLM's sleep frees only its weight and KV pools (vllm/v1/worker/gpu_worker.py:540, :813);
    the CUDA graphs captured outside them (:881-883) stay while the policy trains."""
    training = {**FOUR_K, "use_vllm": True, "vllm_gpu_memory_utilization": 0.3}
    training["vllm_enable_sleep_mode"] = sleep
    result = plan(training, "Qwen/Qwen3-1.7B", strategy="zero2", gpu_memory_gb=80, gpu_name="H100")
    vllm = [term for term in result.terms if term.name.startswith("vLLM")]
    reserved = int(0.3 * 79.2 * GIB)
    assert sum(term.bytes for term in vllm) == reserved
    always = sum(term.bytes for term in vllm if term.phase == "state")
    assert always == (ENGINE_OVERHEAD_BYTES if sleep else reserved)
    train_phase = sum(term.bytes for term in result.terms if term.phase in ("state", "train"))
    if result.verdict.peak_phase == "train":
        assert result.verdict.peak_bytes == train_phase


def test_shipped_4b_lora_recipe_fits_with_a_margin():
    """The one-GPU LoRA recipe, planned on its own `launch:` H100: below 90% of 79.2 GiB in every
    phase (micro-batches of 32 peaked at 72 GiB in training, 91%)."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.plan.recipe_plan import header_topology, plan_recipe
    from tests._paths import ROOT

    recipe = load_recipe(ROOT / "recipes/qwen3-4b/math-lora.yaml")
    verdict = plan_recipe(recipe, header_topology(recipe)).plan.verdict
    assert verdict.status == "fits" and verdict.peak_bytes < 0.8 * verdict.gpu_bytes, verdict
