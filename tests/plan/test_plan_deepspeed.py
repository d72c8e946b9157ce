"""The plan's ZeRO model state against DeepSpeed's own estimators, called with the same counts.

DeepSpeed's functions take total_params and largest_layer_params (no model is built):
stage3.py `estimate_zero3_model_states_mem_needs` counts 4 x the largest module's parameters
+ 18 x total / GPUs without offload; stage_1_and_2.py `estimate_zero2_model_states_mem_needs`
2 x total + 18 x total / GPUs ("18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit +
8_optimizer_states_32bit"). The plan counts the terms as stage3.py's code runs them, which
differs from its ZeRO-3 estimator in two named ways: the bf16 gradient partition DeepSpeed allocates for every
parameter (stage3.py:791, `grad_partitions_flat_buffer`, dtype `gradient_accumulation_dtype` =
bf16 under `bf16`; 2 x total / GPUs, which the ZeRO-2 estimator counts and the ZeRO-3 one
leaves out), and the fp32 gradients, which ZeRO-3's step makes and frees one sub-group (1e9
parameters) at a time (`_release_sub_group`), where the estimator counts them all at once.
"""

from __future__ import annotations

import pytest

from gspo_trl.plan.memory import DEEPSPEED_SUB_GROUP_SIZE, model_state_terms
from gspo_trl.plan.model_shape import load_model_shape
from gspo_trl.plan.setup import make_setup

stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
stage_1_and_2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")

MODEL_STATE = ("weights", "gradients", "master", "optimizer", "fp32 gradient", "gathered")
CASES = [(model, ranks) for model in ("Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B") for ranks in (8, 24)]


def deepspeed_largest_module(shape) -> int:
    """DeepSpeed's `model_to_params`: the module with most parameters of its own (recurse=False),
    for Qwen3 the embedding (or an untied LM head of the same size)."""
    return max(shape.embedding_params, shape.lm_head_params, shape.q_dim * shape.hidden_size)


def plan_model_state(shape, strategy: str, ranks: int) -> dict[str, int]:
    setup = make_setup({}, shape, strategy, nodes=ranks // 8, gpus_per_node=8, gpu_memory_gb=80)
    return {t.name: t.bytes for t in model_state_terms(shape, setup) if t.name.startswith(MODEL_STATE)}


@pytest.mark.parametrize(("model", "ranks"), CASES)
def test_zero3_model_state_matches_deepspeeds_estimator(model, ranks):
    shape = load_model_shape(model)
    _, deepspeed_gpu, deepspeed_buffers = stage3.estimate_zero3_model_states_mem_needs(
        total_params=shape.total_params,
        largest_layer_params=deepspeed_largest_module(shape),
        num_gpus_per_node=8,
        num_nodes=ranks // 8,
        cpu_offload=False,
    )
    terms = plan_model_state(shape, "zero3", ranks)
    partition = shape.total_params // ranks
    bf16_gradient_partition = terms["gradients"]
    assert bf16_gradient_partition == partition * 2
    fp32_gradients_freed_early = 4 * (partition - min(partition, DEEPSPEED_SUB_GROUP_SIZE))
    gathered = terms["gathered shard units (bf16)"]
    sharded = sum(terms.values()) - gathered
    reconciled = sharded - bf16_gradient_partition + fp32_gradients_freed_early
    print(
        f"{model} on {ranks}: plan {sum(terms.values()) / 2**30:.2f} GiB, DeepSpeed's estimator "
        f"{deepspeed_gpu / 2**30:.2f} GiB; sharded part reconciled {reconciled / 2**30:.2f} vs "
        f"{(deepspeed_gpu - deepspeed_buffers) / 2**30:.2f} GiB; gathered {gathered / 2**30:.2f} vs "
        f"{deepspeed_buffers / 2**30:.2f} GiB"
    )
    assert reconciled == pytest.approx(deepspeed_gpu - deepspeed_buffers, rel=0.03)
    # DeepSpeed's buffers: 4 bytes x its largest module; the plan's: two bf16 shard units. The
    # same for a dense model, whose largest unit is the embedding; an MoE decoder layer (128
    # experts) outweighs the embedding, and the plan counts that layer.
    assert gathered == (deepspeed_buffers if not shape.is_moe else 4 * shape.layer_params(0))


@pytest.mark.parametrize(("model", "ranks"), CASES)
def test_zero2_model_state_matches_deepspeeds_estimator(model, ranks):
    shape = load_model_shape(model)
    _, deepspeed_gpu = stage_1_and_2.estimate_zero2_model_states_mem_needs(
        total_params=shape.total_params, num_gpus_per_node=8, num_nodes=ranks // 8, cpu_offload=False
    )
    assert sum(plan_model_state(shape, "zero2", ranks).values()) == pytest.approx(deepspeed_gpu, rel=0.03)
