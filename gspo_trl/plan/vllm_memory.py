"""vLLM in colocate mode: what its share of the GPU holds, and how many rollouts run at once.

vLLM claims `gpu_memory_utilization` x total GPU memory, loads its own copy of the weights (split
over `vllm_tensor_parallel_size` GPUs), keeps room for its forward pass and CUDA graphs, and pages
the KV cache into the rest: 2 (K and V) x layers x kv_heads x head_dim x dtype bytes per token,
its KV heads split over the TP group. TRL 1.16 caps the engine at max_num_seqs =
per_device_train_batch_size x vllm_tensor_parallel_size x steps_per_generation. With
`vllm_enable_sleep_mode` the weights and KV cache are released between rollouts but the CUDA
graphs stay; without it the whole share stays reserved through the backward pass.
The TRL and vLLM lines: docs/plan.md ("Memory per GPU").
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo_trl.plan.memory import MemoryTerm
from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import Setup

GIB = 2**30
ENGINE_OVERHEAD_BYTES = 1 * GIB
"""vLLM's share outside its weights and KV cache (CUDA graphs, persistent buffers, profiled
forward activations): an estimate. Sleep mode does not free it; the plan counts it always."""


@dataclass(frozen=True)
class VllmPlan:
    """The colocated engine on one GPU. `kv_cache_bytes` < 0 means the engine cannot start."""

    reserved_bytes: int
    weight_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int
    max_num_seqs: int
    sequence_length: int

    @property
    def sequences_fitting_kv(self) -> int:
        """Full-length rollouts whose KV cache fits at once: kv_tokens // (prompt + completion)."""
        return self.kv_tokens // self.sequence_length

    @property
    def concurrent_sequences(self) -> int:
        """Rollouts decoding together: capped by the KV cache and by TRL's max_num_seqs."""
        return min(self.max_num_seqs, self.sequences_fitting_kv)


def kv_bytes_per_token_per_gpu(shape: ModelShape, setup: Setup) -> int:
    """KV-cache bytes per token on one GPU of the engine's TP group (KV heads split over TP)."""
    kv_dtype_bytes = setup.weight_bytes  # vLLM's kv_cache_dtype "auto" = the model dtype
    heads_per_gpu = max(1, shape.num_kv_heads // setup.vllm_tensor_parallel_size)
    return 2 * shape.num_layers * heads_per_gpu * shape.head_dim * kv_dtype_bytes


def vllm_plan(shape: ModelShape, setup: Setup) -> VllmPlan:
    """The colocated engine's split of its `vllm_gpu_memory_utilization` share on one GPU."""
    reserved = int(setup.vllm_gpu_memory_utilization * setup.gpu_memory_gib * GIB)
    weights = shape.total_params * setup.weight_bytes // setup.vllm_tensor_parallel_size
    kv_cache = reserved - weights - ENGINE_OVERHEAD_BYTES
    per_token = kv_bytes_per_token_per_gpu(shape, setup)
    return VllmPlan(
        reserved_bytes=reserved,
        weight_bytes=weights,
        kv_cache_bytes=kv_cache,
        kv_bytes_per_token=per_token,
        kv_tokens=max(0, kv_cache) // per_token,
        max_num_seqs=setup.per_device_train_batch_size
        * setup.vllm_tensor_parallel_size
        * setup.steps_per_generation,
        sequence_length=setup.sequence_length,
    )


def vllm_terms(plan: VllmPlan, setup: Setup) -> list[MemoryTerm]:
    """The engine's reservation as lines of the memory table: all of it always live without
    sleep mode; with it, weights + KV cache live only in the rollout, the rest always."""
    share = f"{setup.vllm_gpu_memory_utilization:.0%} of the GPU"
    if not setup.vllm_enable_sleep_mode:
        note = f"{share}, held while training"
        return [MemoryTerm("vLLM colocate (weights + KV cache)", plan.reserved_bytes, "state", note)]
    resident = min(ENGINE_OVERHEAD_BYTES, plan.reserved_bytes)
    return [
        MemoryTerm(
            "vLLM colocate (weights + KV cache)",
            plan.reserved_bytes - resident,
            "rollout",
            f"{share} less its resident part; freed while training (sleep mode)",
        ),
        MemoryTerm(
            "vLLM CUDA graphs, buffers (asleep)", resident, "state", "estimate; sleep does not free them"
        ),
    ]
