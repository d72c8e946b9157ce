"""Tokens, FLOPs and the generation floor, counted by hand on the toy model of test_plan_memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gspo_trl.plan.model_shape import ModelShape, load_model_shape
from gspo_trl.plan.setup import make_setup
from gspo_trl.plan.throughput import throughput

TOY = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "tie_word_embeddings": True,
}
# Active matmul params: 2 layers x 37_024 + final norm 64 (non-embedding) + LM head 1000 x 64.
MATMUL_PARAMS = 74_112 + 64_000
# Forward FLOPs per token (Kaplan): 2N + 2 x layers x context x d_attn = 2N + 2 x 2 x 64 x 64.
FORWARD_PER_TOKEN = 2 * MATMUL_PARAMS + 2 * 2 * 64 * 64
# Gradient checkpointing reruns the decoder layers less their down projections (64 x 128 each);
# not the LM head (gspo_trl.model.sizing.flops.recompute_flops_per_token).
RECOMPUTE_PER_TOKEN = FORWARD_PER_TOKEN - 2 * 64_000 - 2 * 2 * 64 * 128
TOKENS = 2 * 4 * 64  # 2 per GPU x 4 GPUs x (16 + 48) tokens, steps_per_generation 1


@pytest.fixture
def toy(tmp_path: Path) -> ModelShape:
    (tmp_path / "config.json").write_text(json.dumps(TOY))
    return load_model_shape(str(tmp_path))


def run(toy: ModelShape, **training):
    training = {
        "per_device_train_batch_size": 2,
        "max_prompt_length": 16,
        "max_completion_length": 48,
        **training,
    }
    setup = make_setup(training, toy, "ddp", nodes=1, gpus_per_node=4, gpu_memory_gb=80)
    return throughput(toy, setup, None, peak_tflops=1.0, bandwidth_tb_s=1.0)


def test_matmul_params(toy):
    assert toy.active_matmul_params == MATMUL_PARAMS


@pytest.mark.parametrize(
    ("training", "passes", "old", "reference"),
    [
        ({"gradient_checkpointing": False}, 3, 0, 0),  # 6 N T
        ({"gradient_checkpointing": True}, 3 + RECOMPUTE_PER_TOKEN / FORWARD_PER_TOKEN, 0, 0),  # + recompute
        ({"gradient_checkpointing": False, "num_iterations": 2}, 6, 1, 0),  # rollout reused: old log-probs
        ({"gradient_checkpointing": False, "beta": 0.04}, 3, 0, 1),  # reference model forward
    ],
)
def test_flops_per_rollout_batch(toy, training, passes, old, reference):
    work = run(toy, **training)
    assert work.tokens == TOKENS
    assert work.training_flops == pytest.approx(passes * FORWARD_PER_TOKEN * TOKENS)
    assert work.old_logprob_flops == old * FORWARD_PER_TOKEN * TOKENS
    assert work.reference_flops == reference * FORWARD_PER_TOKEN * TOKENS
    # 1 TFLOPS per GPU, 4 GPUs
    assert work.compute_seconds == pytest.approx(work.total_flops / 4e12)


def test_rollout_batch_shape(toy):
    work = run(toy, gradient_accumulation_steps=4, num_generations=4)
    # steps_per_generation defaults to gradient_accumulation_steps: 2 x 4 GPUs x 4 = 32 completions
    assert (work.completions, work.prompts, work.optimizer_steps) == (32, 8, 1)


def test_generation_floor_by_hand(toy):
    # 2 sequences decode together for 48 steps; each step reads the bf16 weights (138_112 x 2 bytes)
    # and the cache of both: 2 x (16 + t) tokens x 256 bytes (2 x 2 layers x 2 heads x 16 x 2 bytes).
    weights = 48 * 138_112 * 2
    kv = 2 * 256 * sum(16 + t for t in range(1, 49))
    assert run(toy).generation_seconds == pytest.approx((weights + kv) / 1e12)


def test_moe_flops_use_active_experts():
    shape = load_model_shape("Qwen/Qwen3-30B-A3B")
    inactive = 48 * (128 - 8) * 3 * 2048 * 768
    assert shape.active_matmul_params == shape.non_embedding_params - inactive + 151936 * 2048
    assert shape.active_matmul_params / 1e9 == pytest.approx(3.04, abs=0.01)


def test_lora_training_flops_skip_the_frozen_weight_gradients(toy):
    """LoRA r=4 on q_proj (64 -> 64): the base runs forward + input gradients (4N per token) and
    the adapters all three (6A); the old count charged 6N as for full fine-tuning."""
    training = {"per_device_train_batch_size": 2, "max_prompt_length": 16, "max_completion_length": 48}
    training["gradient_checkpointing"] = False
    setup = make_setup(
        training,
        toy,
        "ddp",
        nodes=1,
        gpus_per_node=4,
        gpu_memory_gb=80,
        lora={"r": 4, "target_modules": ["q_proj"]},
    )
    work = throughput(toy, setup, None, peak_tflops=1.0, bandwidth_tb_s=1.0)
    adapters = 2 * 4 * (64 + 64)  # 2 layers x r x (in + out)
    expected = (3 * FORWARD_PER_TOKEN - 2 * MATMUL_PARAMS + 6 * adapters) * TOKENS
    assert work.training_flops == pytest.approx(expected)
