"""Per-GPU bytes of the model state: weights, gradients, optimizer moments, fp32 master weights.

ZeRO counts mixed-precision Adam at 16 bytes per parameter; over N GPUs ZeRO-2 keeps 2Ψ + 14Ψ/N
and ZeRO-3 16Ψ/N, and DeepSpeed's optimizer step adds the fp32 cast of the bf16 gradient
partition (+4Ψ/N) in the `step` phase. Where DeepSpeed's estimators and its code disagree the
plan follows the code (tests/plan/test_plan_deepspeed.py reconciles the two term by term).
The torch-native strategies train in the dtype gspo_trl.model.loading.precision picks: ddp holds
fp32 weights at 4 + 4 + 8 bytes per parameter plus DDP's gradient buckets; fsdp2 16 bytes per
trainable parameter, all sharded. ZeRO-3 and FSDP2 also hold about two gathered bf16 shard units.
LoRA: the base is frozen (weights only); PEFT keeps adapters in fp32.
Everything here is an estimate: allocator fragmentation and communication buckets come on top.
The sources, line by line: docs/plan.md ("Memory per GPU").
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import LoraSpec, Setup

RUNTIME_OVERHEAD_BYTES = 2 * 2**30
"""CUDA context, NCCL buffers and allocator slack per GPU: an estimate, not a measurement."""
DEEPSPEED_SUB_GROUP_SIZE = 10**9
"""deepspeed/runtime/zero/config.py: `sub_group_size: int = Field(pp_int(1e9), ge=0)`."""


@dataclass(frozen=True)
class MemoryTerm:
    """One line of the per-GPU memory table.

    `phase` says when the bytes are live: `state` always (weights, optimizer), `train` during the
    policy forward/backward, `rollout` while vLLM generates, `step` in the optimizer step. The
    verdict adds state to the largest of those phases.
    """

    name: str
    bytes: int
    phase: str
    note: str = ""


def lora_adapter_params(shape: ModelShape, lora: LoraSpec, active: bool = False) -> int:
    """LoRA A and B matrices: r x (in + out) per targeted linear, every layer, every expert
    (Hu et al. 2021, "LoRA"). Expert MLPs of MoE layers count once per expert, or with `active`
    once per expert a token is routed to (the adapters one token's FLOPs pass through)."""
    h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
    attention = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h}
    total = 0
    for index in range(shape.num_layers):
        if shape.is_moe_layer(index):
            width = shape.moe_intermediate_size
            copies = shape.num_experts_per_tok if active else shape.num_experts
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


def fp32_gradient_partition_params(trainable: int, world_size: int, strategy: str) -> int:
    """Parameters whose fp32 gradient DeepSpeed holds at once in its optimizer step. ZeRO-2
    casts each parameter group's bf16 partition `.to(fp32)` (stage_1_and_2.py step; the weight
    decay group is nearly all of it); ZeRO-3 one sub-group at a time (stage3.py step,
    `_release_sub_group`: "get rid of the fp32 gradients"), `sub_group_size` 1e9 by default."""
    partition = trainable // world_size
    return min(partition, DEEPSPEED_SUB_GROUP_SIZE) if strategy == "zero3" else partition


def model_state_terms(shape: ModelShape, setup: Setup) -> list[MemoryTerm]:
    """Weights, gradients, optimizer moments and master weights per GPU, for `setup.strategy`."""
    n = setup.world_size
    total = shape.total_params
    adapters = lora_adapter_params(shape, setup.lora) if setup.lora else 0
    trainable = adapters if setup.lora else total
    frozen = total if setup.lora else 0
    w = setup.train_weight_bytes  # gspo_trl.model.loading.precision: fp32 where nothing keeps a master
    dtype = setup.train_weights_dtype
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
        terms.append(MemoryTerm("gradients", trainable * half // n, "state", "sharded, bf16 accumulation"))
        if setup.bf16:
            terms.append(MemoryTerm("master weights (fp32)", trainable * 4 // n, "state", "sharded"))
        terms.append(MemoryTerm("optimizer (AdamW, 2 fp32 moments)", trainable * 8 // n, "state", "sharded"))
        if setup.bf16:
            terms.append(
                MemoryTerm(
                    "fp32 gradient partition",
                    fp32_gradient_partition_params(trainable, n, strategy) * 4,
                    "step",
                    "one sub-group, optimizer step only",
                )
            )
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
        terms.append(MemoryTerm("weights", weights, "state", f"replicated, {dtype}"))
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
        ref_bytes = setup.forward_weight_bytes
        terms.append(
            MemoryTerm("reference model (beta > 0)", total * ref_bytes // ref_shards, "state", "frozen copy")
        )
    terms.append(MemoryTerm("CUDA context, NCCL, allocator", RUNTIME_OVERHEAD_BYTES, "state", "estimate"))
    return terms
