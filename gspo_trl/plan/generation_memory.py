"""Rollouts without vLLM: the KV cache `transformers` generate holds on each training GPU.

TRL 1.16 without `use_vllm` generates each rank's share of the rollout batch in one
`unwrapped_model.generate` call (trl/trainer/grpo_trainer.py, `_generate_single_turn`):
per_device_train_batch_size x steps_per_generation sequences decode together, and the
DynamicCache grows to (prompt + completion) tokens of K and V for every layer. The policy's
training activations are gone by then, so this is a `rollout` phase term.
"""

from __future__ import annotations

from gspo_trl.plan.memory import MemoryTerm
from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import Setup


def generate_kv_term(shape: ModelShape, setup: Setup) -> MemoryTerm:
    """KV cache of one rank's rollout sequences at full length (K and V, every layer, model dtype)."""
    sequences = setup.per_device_train_batch_size * setup.steps_per_generation
    element = 2 if setup.bf16 else setup.weight_bytes
    kv = sequences * setup.sequence_length * shape.kv_bytes_per_token(element)
    note = f"{sequences} sequences x {setup.sequence_length} tokens decoding together"
    return MemoryTerm("generate KV cache (transformers)", kv, "rollout", note)
