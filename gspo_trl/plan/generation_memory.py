"""Generation with `transformers` generate on a training GPU: the KV cache it holds.

TRL 1.16 without `use_vllm` generates each rank's share of the rollout batch in one
`unwrapped_model.generate` call (trl/trainer/grpo_trainer.py, `_generate_single_turn`):
per_device_train_batch_size x steps_per_generation sequences decode together, and the
DynamicCache grows to (prompt + completion) tokens of K and V for every layer. The policy's
training activations are gone by then, so this is a `rollout` phase term. Held-out
evaluation without a colocated vLLM engine uses the same cache per generate batch
(gspo_trl.plan.heldout_memory).

The cache's dtype follows the forward: accelerate wraps the model's forward in bf16 autocast
and unwrapping keeps the wrapper (`keep_fp32_wrapper=True`), so V (a projection's output) is
bf16; K passes through `k_norm`, whose weight is in the trained dtype, so on fp32 weights
(gspo_trl.model.loading.precision) K is cached in fp32 (modeling_qwen3.py: `self.weight *
hidden_states.to(input_dtype)`, then the rotary embedding in that dtype).
"""

from __future__ import annotations

from gspo_trl.plan.memory import MemoryTerm
from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import Setup


def hf_kv_bytes_per_token(shape: ModelShape, setup: Setup) -> int:
    """K and V bytes per token, every layer, as HF generate caches them (see the module docstring)."""
    key = max(setup.forward_weight_bytes, setup.compute_bytes)
    value = setup.compute_bytes
    return shape.num_layers * shape.kv_dim * (key + value)


def generate_kv_term(shape: ModelShape, setup: Setup) -> MemoryTerm:
    """KV cache of one rank's rollout sequences at full length."""
    sequences = setup.per_device_train_batch_size * setup.steps_per_generation
    kv = sequences * setup.sequence_length * hf_kv_bytes_per_token(shape, setup)
    note = f"{sequences} sequences x {setup.sequence_length} tokens decoding together"
    return MemoryTerm("generate KV cache (transformers)", kv, "rollout", note)
