"""Per-GPU memory terms on a toy model small enough to count by hand, and the vLLM split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gspo_trl.plan.activations import activation_term, layer_activation_bytes_per_token, logits_term
from gspo_trl.plan.memory import RUNTIME_OVERHEAD_BYTES, lora_adapter_params, model_state_terms
from gspo_trl.plan.model_shape import ModelShape, load_model_shape
from gspo_trl.plan.setup import LINEAR_MODULES, LoraSpec, Setup, make_setup
from gspo_trl.plan.vllm_memory import vllm_plan

# Toy: vocab 1000, hidden 64, MLP 128, 2 layers, 4 heads / 2 KV heads of 16, tied embeddings.
# Per layer: q 64x64 + k 64x32 + v 64x32 + o 64x64 + q/k norms 2x16 = 12_320; MLP 3x64x128 = 24_576;
# norms 2x64 = 128 -> 37_024. Two layers + final norm 64 + embedding 1000x64 = 138_112 = PSI.
TOY = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
PSI = 138_112


@pytest.fixture
def toy(tmp_path: Path) -> ModelShape:
    (tmp_path / "config.json").write_text(json.dumps(TOY))
    return load_model_shape(str(tmp_path))


def toy_setup(toy: ModelShape, strategy: str, lora: dict | None = None, **training) -> Setup:
    training = {
        "per_device_train_batch_size": 2,
        "max_prompt_length": 16,
        "max_completion_length": 48,
        **training,
    }
    return make_setup(training, toy, strategy, nodes=1, gpus_per_node=4, gpu_memory_gb=80, lora=lora)


def state(terms) -> dict[str, int]:
    return {t.name.split(" (")[0]: t.bytes for t in terms if t.name != "CUDA context, NCCL, allocator"}


def test_toy_parameter_count(toy):
    assert toy.total_params == PSI


# Bytes per GPU over 4 GPUs with bf16 weights, from the module docstring's rules:
# ddp 2 + 2 (+2 buckets) + 4 (bf16 moments); ZeRO 2 + 2 + 12 (K) with ZeRO-2 / ZeRO-3 sharding;
# fsdp2 fp32 shards 4 + 4 + 8, all sharded, plus two gathered bf16 units (embedding 64_000 params).
STRATEGY_TABLE = [
    (
        "ddp",
        {"weights": 2 * PSI, "gradients": 2 * PSI, "DDP gradient buckets": 2 * PSI, "optimizer": 4 * PSI},
    ),
    (
        "zero2",
        {
            "weights": 2 * PSI,
            "gradients": 2 * PSI // 4,
            "master weights": PSI,
            "optimizer": 2 * PSI,
            "fp32 gradient partition": PSI,
        },
    ),
    (
        "zero3",
        {
            "weights": 2 * PSI // 4,
            "gradients": 2 * PSI // 4,
            "master weights": PSI,
            "optimizer": 2 * PSI,
            "fp32 gradient partition": PSI,
            "gathered shard units": 2 * 64_000 * 2,
        },
    ),
    (
        "fsdp2",
        {"weights": PSI, "gradients": PSI, "optimizer": 2 * PSI, "gathered shard units": 2 * 64_000 * 2},
    ),
]


@pytest.mark.parametrize(("strategy", "expected"), STRATEGY_TABLE)
def test_model_state_per_gpu(toy, strategy, expected):
    assert state(model_state_terms(toy, toy_setup(toy, strategy))) == expected


def test_zero3_is_16_bytes_per_param_over_the_gpus(toy):
    """ZeRO paper: (2 + 2 + K) x PSI / N_d with K = 12: 16 x 138_112 / 4 = 552_448 bytes."""
    terms = state(model_state_terms(toy, toy_setup(toy, "zero3")))
    terms.pop("fp32 gradient partition")  # the optimizer step's, when the activations are gone
    sharded = sum(v for k, v in terms.items() if k != "gathered shard units")
    assert sharded == 16 * PSI // 4 == 552_448


def test_zero_formulas_for_qwen3_8b_on_8_gpus():
    shape = load_model_shape("Qwen/Qwen3-8B")
    psi = shape.total_params
    for strategy, expected in (("zero2", 2 * psi + 14 * psi / 8), ("zero3", 16 * psi / 8)):
        setup = make_setup({}, shape, strategy, 1, 8, 80)
        terms = state(model_state_terms(shape, setup))
        terms.pop("gathered shard units", None)
        terms.pop("fp32 gradient partition")
        assert sum(terms.values()) == pytest.approx(expected, abs=8)


@pytest.mark.parametrize(
    ("lora", "adapters"),
    [
        (LoraSpec(8, ("q_proj", "v_proj")), 2 * (8 * (64 + 64) + 8 * (64 + 32))),  # 3_584
        # r=2: q 2x128, k 2x96, v 2x96, o 2x128, gate/up/down 3 x 2x192 = 2_048 per layer
        (LoraSpec(2, LINEAR_MODULES), 2 * 2048),
    ],
)
def test_lora_adapter_counts(toy, lora, adapters):
    assert lora_adapter_params(toy, lora) == adapters


def test_lora_zero3_trains_only_the_adapters(toy):
    setup = toy_setup(toy, "zero3", lora={"r": 8})  # peft's qwen3 default: q_proj, v_proj
    adapters = 3584
    assert state(model_state_terms(toy, setup)) == {
        "weights": (PSI + adapters) * 2 // 4,
        "gradients": adapters * 2 // 4,
        "master weights": adapters,
        "optimizer": adapters * 2,
        "fp32 gradient partition": adapters,
        "gathered shard units": 256_000,
    }


def test_runtime_overhead_is_one_term(toy):
    names = [t.name for t in model_state_terms(toy, toy_setup(toy, "ddp"))]
    assert names.count("CUDA context, NCCL, allocator") == 1
    assert RUNTIME_OVERHEAD_BYTES == 2 * 2**30


def test_activation_bytes_by_hand(toy):
    # bf16 weights and compute (no upcast: dtype None), per token per layer, bytes:
    # two RMSNorms h x (4 fp32 copy + 2 normed) = 768; q/k/v input h x 2 = 128;
    # q_norm q x 6 = 384, k_norm kv x 6 = 192; SDPA q, repeated k and v, output 4q x 2 = 512,
    # its additive mask s x 2 = 128, log-sum-exp 4 heads x 4 = 16; MLP input 128 + 4I x 2 = 1024.
    setup = toy_setup(toy, "ddp", gradient_checkpointing=False)
    per_layer = 768 + 128 + 384 + 192 + 512 + 128 + 16 + 128 + 1024
    assert layer_activation_bytes_per_token(toy, 0, setup) == per_layer == 3280
    tokens, head, backward = 2 * (16 + 48), 64 * 6, 2 * 64 * 2 + 128 * 2
    boolean_mask = 2 * 64 * 64
    full = activation_term(toy, setup)
    checkpointed = activation_term(toy, toy_setup(toy, "ddp", gradient_checkpointing=True))
    assert full.bytes == tokens * (2 * per_layer + head + backward) + boolean_mask
    assert checkpointed.bytes == tokens * (2 * 64 * 2 + per_layer + head + backward) + boolean_mask


def test_fp32_weights_under_autocast_keep_an_fp32_residual_and_bf16_weight_copies(toy):
    """DDP + bfloat16 trains fp32 weights (gspo_trl.model.loading.precision) under bf16 autocast: the
    checkpointed layer inputs are fp32, and each linear saves its own bf16 cast."""
    bf16 = toy_setup(toy, "ddp", gradient_checkpointing=True)
    upcast = make_setup(
        {"per_device_train_batch_size": 2, "max_prompt_length": 16, "max_completion_length": 48},
        toy,
        "ddp",
        nodes=1,
        gpus_per_node=4,
        gpu_memory_gb=80,
        dtype="bfloat16",
    )
    assert (bf16.train_weights_dtype, upcast.train_weights_dtype) == ("bfloat16", "float32")
    assert (upcast.forward_weight_bytes, upcast.compute_bytes) == (4, 2)
    assert state(model_state_terms(toy, upcast))["weights"] == 4 * PSI
    # q/k/v read one fp32 norm output: three bf16 casts (3 x 64 x 2) instead of one shared 64 x 2
    grown = layer_activation_bytes_per_token(toy, 0, upcast) - layer_activation_bytes_per_token(toy, 0, bf16)
    norms, linear_inputs = 2 * 64 * (4 - 2), (3 * 64 * 2 - 64 * 2) + (2 * 64 * 2 - 64 * 2)
    assert grown == norms + linear_inputs


def test_fused_lm_head_buffers_by_hand(toy):
    scored = 2 * 48
    tile, stats, hidden = scored * 1000 * 2, scored * 7 * 4, scored * 64 * (4 + 2)
    weight_grad = 1000 * 64 * 4
    assert logits_term(toy, toy_setup(toy, "ddp")).bytes == tile + stats + hidden + weight_grad
    assert logits_term(toy, toy_setup(toy, "ddp", lora={"r": 8})).bytes == tile + stats + hidden


@pytest.mark.parametrize(
    ("batch", "steps_per_generation", "concurrent"),
    [(8, 1, 8), (32, 4, 81)],  # capped by TRL's max_num_seqs, then by the KV cache
)
def test_vllm_colocate_split(batch, steps_per_generation, concurrent):
    shape = load_model_shape("Qwen/Qwen3-1.7B")
    training = {
        "per_device_train_batch_size": batch,
        "steps_per_generation": steps_per_generation,
        "max_prompt_length": 512,
        "max_completion_length": 3584,
        "use_vllm": True,
        "vllm_gpu_memory_utilization": 0.5,
    }
    engine = vllm_plan(shape, make_setup(training, shape, "zero2", 1, 8, 80))
    assert engine.reserved_bytes == 40 * 2**30
    assert engine.weight_bytes == 1_720_574_976 * 2
    assert engine.kv_tokens == (40 * 2**30 - 1_720_574_976 * 2 - 2**30) // 114_688 == 335_124
    assert engine.sequences_fitting_kv == 335_124 // 4096 == 81
    assert engine.concurrent_sequences == concurrent


@pytest.mark.parametrize(
    ("hub_id", "tp", "per_gpu"),
    [
        ("Qwen/Qwen3-8B", 1, 147_456),
        ("Qwen/Qwen3-8B", 2, 147_456 // 2),
        ("Qwen/Qwen3-8B", 8, 147_456 // 8),
        ("Qwen/Qwen3-30B-A3B", 8, 2 * 48 * 1 * 128 * 2),  # 4 KV heads over 8 GPUs: one head each
    ],
)
def test_vllm_tensor_parallel_splits_kv_heads_and_weights(hub_id, tp, per_gpu):
    shape = load_model_shape(hub_id)
    training = {"use_vllm": True, "vllm_tensor_parallel_size": tp}
    engine = vllm_plan(shape, make_setup(training, shape, "zero3", 1, 8, 80))
    assert engine.kv_bytes_per_token == per_gpu
    assert engine.weight_bytes == shape.total_params * 2 // tp


@pytest.mark.parametrize(
    ("steps_per_generation", "use_vllm", "expected"),
    [(1, False, 32_768), (4, False, 131_072), (4, True, None)],
)
def test_generate_kv_cache_without_vllm(toy, steps_per_generation, use_vllm, expected):
    # toy K+V per token in bf16: 2 x 2 layers x 2 KV heads x 16 x 2 bytes = 256; 2 per GPU x 64 tokens.
    from gspo_trl.plan.planner import memory_terms

    setup = toy_setup(toy, "ddp", steps_per_generation=steps_per_generation, use_vllm=use_vllm)
    terms = {t.name: t for t in memory_terms(toy, setup)[0]}
    kv = terms.get("generate KV cache (transformers)")
    assert (kv.bytes if kv else None) == expected
    if kv:
        assert kv.phase == "rollout"


def test_30b_a3b_backward_holds_the_dispatched_input_gradient_and_the_whole_expert_gradient():
    """Qwen3-30B-A3B under ZeRO-3 (hidden 2048, 128 experts of width 768, top-8, bf16): the MoE
    layer's backward holds, per token, each routed copy's fused gate/up gradient (8 x 2 x 768) and
    its dispatched input's gradient (8 x 2048) beside the layer's output and input gradients
    (2 x 2048); and once, the layer's whole expert-weight gradient (128 x 3 x 2048 x 768) before
    ZeRO-3 shards it. Main counted 20,480 bytes per token and no expert gradient: 4.05 GiB short
    at the recipe's 69,632 tokens."""
    from gspo_trl.plan.activations import expert_weight_gradient_bytes, layer_backward_bytes_per_token

    shape = load_model_shape("Qwen/Qwen3-30B-A3B")
    training = {"per_device_train_batch_size": 8, "max_prompt_length": 512, "max_completion_length": 8192}
    setup = make_setup(training, shape, "zero3", nodes=3, gpus_per_node=8, gpu_memory_gb=80, lora=None)
    assert layer_backward_bytes_per_token(shape, 0, setup) == 2 * 2048 * 2 + 8 * (2 * 768 + 2048) * 2
    assert expert_weight_gradient_bytes(shape, setup) == 128 * 3 * 2048 * 768 * 2
    short = 69_632 * (8 * (768 + 2048) * 2) + 128 * 3 * 2048 * 768 * 2
    assert round(short / 2**30, 2) == 4.05
    lora = make_setup(training, shape, "zero3", nodes=3, gpus_per_node=8, gpu_memory_gb=80, lora={"r": 16})
    ddp = make_setup(training, shape, "ddp", nodes=1, gpus_per_node=8, gpu_memory_gb=80, lora=None)
    assert expert_weight_gradient_bytes(shape, lora) == expert_weight_gradient_bytes(shape, ddp) == 0
