"""Per-GPU bytes of the model state: weights, gradients, optimizer moments, fp32 master weights.

The ZeRO paper (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", §3.1, §5) counts mixed-precision Adam at 16 bytes per parameter: 2 (bf16/fp16
weights) + 2 (gradients) + K = 12 (fp32 master copy, momentum, variance). Over N_d data-parallel
GPUs, ZeRO-2 keeps 2Ψ + (2 + K)Ψ / N_d per GPU and ZeRO-3 (2 + 2 + K)Ψ / N_d. That is what
DeepSpeed runs here (accelerate `mixed_precision: bf16`: bf16 module, fp32 master partitions).

The torch-native strategies differ:
- ddp: torch AdamW keeps its moments in the parameter dtype and HF autocast keeps no master copy,
  so bf16 weights cost 2 + 2 + 4 = 8 bytes per trainable parameter (fp32 weights: 4 + 4 + 8).
  DDP also holds gradient buckets as large as the gradients (`gradient_as_bucket_view=False`).
- fsdp2: accelerate upcasts trainable parameters to fp32 under mixed precision (the fp32 shard is
  the master), so 4 + 4 + 8 = 16 bytes per trainable parameter, all of it sharded.
ZeRO-3 and FSDP2 also hold gathered bf16 copies of about two shard units (the one running and the
one prefetched). LoRA: the base is frozen (weights only); PEFT keeps adapters in fp32.
Everything here is an estimate: allocator fragmentation and communication buckets come on top.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import LoraSpec, Setup

RUNTIME_OVERHEAD_BYTES = 2 * 2**30
"""CUDA context, NCCL buffers and allocator slack per GPU: an estimate, not a measurement."""


@dataclass(frozen=True)
class MemoryTerm:
    """One line of the per-GPU memory table.

    `phase` says when the bytes are live: `state` always (weights, optimizer), `train` during the
    policy forward/backward, `rollout` while vLLM generates. The verdict adds state to the larger
    of the two phases, or to both when vLLM does not sleep during training.
    """

    name: str
    bytes: int
    phase: str
    note: str = ""


def lora_adapter_params(shape: ModelShape, lora: LoraSpec) -> int:
    """LoRA A and B matrices: r x (in + out) per targeted linear, every layer, every expert
    (Hu et al. 2021, "LoRA"). Expert MLPs of MoE layers count once per expert."""
    h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
    attention = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h}
    total = 0
    for index in range(shape.num_layers):
        if shape.is_moe_layer(index):
            width, copies = shape.moe_intermediate_size, shape.num_experts
        else:
            width, copies = shape.intermediate_size, 1
        mlp = {"gate_proj": h + width, "up_proj": h + width, "down_proj": width + h}
        for module in lora.target_modules:
            total += lora.r * (attention[module] if module in attention else copies * mlp[module])
    return total


def largest_shard_unit(shape: ModelShape) -> int:
    """Parameters of the biggest unit ZeRO-3/FSDP2 gathers at once: a decoder layer or the embedding."""
    layers = max(shape.layer_params(i) for i in range(shape.num_layers))
    return max(layers, shape.embedding_params)


def model_state_terms(shape: ModelShape, setup: Setup) -> list[MemoryTerm]:
    """Weights, gradients, optimizer moments and master weights per GPU, for `setup.strategy`."""
    n = setup.world_size
    total = shape.total_params
    adapters = lora_adapter_params(shape, setup.lora) if setup.lora else 0
    trainable = adapters if setup.lora else total
    frozen = total if setup.lora else 0
    w = setup.weight_bytes
    strategy = setup.strategy
    terms: list[MemoryTerm] = []

    if strategy in ("zero2", "zero3"):
        half = 2 if setup.bf16 else w  # DeepSpeed casts the module to bf16 when bf16 is enabled
        weight_shards = n if strategy == "zero3" else 1
        weights = (total + adapters) * half // weight_shards
        terms.append(
            MemoryTerm(
                "weights", weights, "state", f"bf16, {'sharded' if weight_shards > 1 else 'replicated'}"
            )
        )
        terms.append(MemoryTerm("gradients", trainable * half // n, "state", "sharded"))
        if setup.bf16:
            terms.append(MemoryTerm("master weights (fp32)", trainable * 4 // n, "state", "sharded"))
        terms.append(MemoryTerm("optimizer (AdamW, 2 fp32 moments)", trainable * 8 // n, "state", "sharded"))
    elif strategy == "fsdp2":
        trainable_bytes = 4 if setup.bf16 or setup.lora else w  # accelerate upcast; PEFT fp32 adapters
        weights = (trainable * trainable_bytes + frozen * w) // n
        terms.append(MemoryTerm("weights", weights, "state", "sharded; trainable shards fp32 = master copy"))
        terms.append(MemoryTerm("gradients", trainable * trainable_bytes // n, "state", "sharded"))
        terms.append(
            MemoryTerm(
                "optimizer (AdamW, 2 moments)", 2 * trainable * trainable_bytes // n, "state", "sharded"
            )
        )
    else:  # ddp
        trainable_bytes = 4 if setup.lora else w
        weights = total * w + adapters * 4
        terms.append(MemoryTerm("weights", weights, "state", "replicated"))
        terms.append(MemoryTerm("gradients", trainable * trainable_bytes, "state", "replicated"))
        if n > 1:
            terms.append(
                MemoryTerm(
                    "DDP gradient buckets", trainable * trainable_bytes, "state", "copy of the gradients"
                )
            )
        terms.append(
            MemoryTerm(
                "optimizer (AdamW, 2 moments)", 2 * trainable * trainable_bytes, "state", "param dtype"
            )
        )

    if strategy in ("zero3", "fsdp2"):
        gathered = 2 * largest_shard_unit(shape) * 2
        terms.append(MemoryTerm("gathered shard units (bf16)", gathered, "train", "running + prefetched"))
    if setup.beta > 0 and not setup.lora:
        ref_shards = n if strategy in ("zero3", "fsdp2") else 1
        terms.append(
            MemoryTerm("reference model (beta > 0)", total * w // ref_shards, "state", "frozen copy")
        )
    terms.append(MemoryTerm("CUDA context, NCCL, allocator", RUNTIME_OVERHEAD_BYTES, "state", "estimate"))
    return terms
