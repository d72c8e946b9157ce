"""Disk a run's checkpoints take: what each `checkpoint-N` holds, and how many are on disk at once.

Bytes per parameter of one checkpoint, from what transformers' `Trainer._save_checkpoint` and
DeepSpeed's `save_checkpoint` write: ZeRO-2 16, ZeRO-3 14 (fp32 partitions and AdamW moments,
plus the bf16 model), ddp and fsdp2 12 (fp32 weights and moments; bf16 weights only under
`model.allow_pure_bf16`), LoRA the adapters and their optimizer state only. The scheduler, RNG
states, trainer state and tokenizer add a few MB, not counted.

How many at once: gspo_trl.training.probes.staged_checkpoints writes each checkpoint into
`output_dir/.staging/` and rotates old ones (`save_total_limit`) after the rename, so while a
save runs `save_total_limit` checkpoints plus the one being written are on disk.
Each term, file by file: docs/plan.md ("Disk").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gspo_trl.plan.memory import lora_adapter_params
from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import Setup

DECIMAL_TB = 1e12
"""Disks are sold, and `df -H` reports, in powers of ten."""


@dataclass(frozen=True)
class CheckpointPart:
    """One kind of file in a checkpoint folder, summed over the ranks that write it."""

    name: str
    bytes: int
    note: str


@dataclass(frozen=True)
class DiskPlan:
    """Bytes per checkpoint and how many checkpoints are on disk at the peak (None: unbounded)."""

    parts: tuple[CheckpointPart, ...]
    checkpoints_at_peak: int | None
    how_many: str

    @property
    def per_checkpoint(self) -> int:
        return sum(part.bytes for part in self.parts)

    @property
    def total(self) -> int | None:
        return None if self.checkpoints_at_peak is None else self.per_checkpoint * self.checkpoints_at_peak


def checkpoint_parts(shape: ModelShape, setup: Setup, pure_bf16: bool = False) -> tuple[CheckpointPart, ...]:
    """The files of one checkpoint for `setup.strategy` (module docstring)."""
    params = shape.total_params
    if setup.lora:
        adapters = lora_adapter_params(shape, setup.lora)
        return (
            CheckpointPart("adapter_model.safetensors", adapters * 4, "LoRA adapters, fp32"),
            CheckpointPart(
                "optimizer state",
                adapters * (12 if setup.strategy.startswith("zero") else 8),
                "adapters' AdamW moments (+ fp32 master under DeepSpeed)",
            ),
        )
    if setup.strategy in ("zero2", "zero3"):
        parts = [CheckpointPart("model.safetensors", params * 2, "bf16")]
        if setup.strategy == "zero2":
            parts.append(CheckpointPart("mp_rank_00_model_states.pt", params * 2, "bf16 module, DP rank 0"))
        parts.append(
            CheckpointPart("*_optim_states.pt", params * 12, "fp32 master + AdamW exp_avg, exp_avg_sq")
        )
        return tuple(parts)
    bf16 = setup.weights_dtype.removeprefix("torch.") in ("bfloat16", "bf16")
    weights = 4 if setup.strategy == "fsdp2" or (bf16 and not pure_bf16) else setup.weight_bytes
    return (
        CheckpointPart(
            "model shards" if setup.strategy == "fsdp2" else "model.safetensors",
            params * weights,
            "fp32" if weights == 4 else "16-bit",
        ),
        CheckpointPart(
            "optimizer.pt", params * 2 * weights, "AdamW exp_avg, exp_avg_sq in the weights' dtype"
        ),
    )


def checkpoints_at_peak(training: Mapping[str, Any]) -> tuple[int | None, str]:
    """How many checkpoints are on disk at once, and why (save_strategy, save_steps, max_steps,
    save_total_limit; TRL's defaults: save every 500 steps, keep all)."""
    strategy = training.get("save_strategy", "steps")
    if strategy == "no":
        return 0, "save_strategy no"
    limit = training.get("save_total_limit")
    steps, every = training.get("max_steps") or 0, training.get("save_steps") or 500
    saves = int(steps // every) if strategy == "steps" and steps > 0 else None
    if limit is None:
        return saves, "every save kept (no save_total_limit)"
    if saves is not None and saves <= limit:
        return saves, f"{saves} saves in max_steps, all kept (save_total_limit {limit})"
    return limit + 1, f"save_total_limit {limit} + the one being written (.staging)"


def plan_disk(
    shape: ModelShape, setup: Setup, training: Mapping[str, Any], pure_bf16: bool = False
) -> DiskPlan:
    """Checkpoint disk for a planned run; `training` holds the recipe's save_* and max_steps keys."""
    held, how = checkpoints_at_peak(training)
    return DiskPlan(checkpoint_parts(shape, setup, pure_bf16), held, how)


def disk_size(n: int) -> str:
    """`n` bytes in decimal units: `0.4 GB`, `61 GB`, `1.28 TB` (what the 30B header quotes)."""
    if n >= DECIMAL_TB:
        return f"{n / DECIMAL_TB:.2f} TB"
    return f"{n / 1e9:.1f} GB" if n < 10e9 else f"{n / 1e9:,.0f} GB"


def format_disk(disk: DiskPlan) -> list[str]:
    """The report's disk section."""
    lines = ["", "Disk for checkpoints (estimate)"]
    lines += [f"  {part.name:38s} {disk_size(part.bytes):>10s}  {part.note}" for part in disk.parts]
    lines.append(f"  {'per checkpoint':38s} {disk_size(disk.per_checkpoint):>10s}")
    total = "unbounded" if disk.total is None else disk_size(disk.total)
    lines.append(f"  {'total at peak':38s} {total:>10s}  {disk.checkpoints_at_peak} x ({disk.how_many})")
    return lines
