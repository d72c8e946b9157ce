"""Held-out evaluation's layout: which engine, how many row shards, how many samples per row.

Pure functions of the run's settings, so `gspo-trl plan` sizes the evaluation the run performs
(gspo_trl.plan.heldout_memory) from the same rules heldout_generation and HeldoutCallback use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

VLLM_COLOCATE = "vllm-colocate"
HF = "hf"
HF_LOCKSTEP = "hf (every rank, lockstep)"

Pass = tuple[int, float]
"""(samples per row, temperature) of one generation pass."""


@dataclass(frozen=True)
class HeldoutLayout:
    """The engine's name and how many disjoint row shards the ranks split the rows into."""

    engine: str
    num_shards: int

    @property
    def lockstep(self) -> bool:
        return self.engine == HF_LOCKSTEP


def forward_is_collective(is_fsdp: bool, is_zero3: bool, ds3_gather_for_generation: bool) -> bool:
    """True when a forward pass on one rank needs the others (sharded weights gathered per layer)."""
    return is_fsdp or (is_zero3 and not ds3_gather_for_generation)


def heldout_layout(
    colocated_vllm: bool, tensor_parallel: int, num_processes: int, collective_forward: bool
) -> HeldoutLayout:
    """The run's colocated vLLM engine, one shard per tensor-parallel group; else HF generate,
    one shard per rank, or every rank on every row in lockstep when a forward is collective."""
    if colocated_vllm:
        return HeldoutLayout(VLLM_COLOCATE, num_processes // tensor_parallel)
    if num_processes > 1 and collective_forward:
        return HeldoutLayout(HF_LOCKSTEP, 1)
    return HeldoutLayout(HF, num_processes)


def shard_rows(num_rows: int, num_shards: int, shard_index: int) -> list[int]:
    """Row indices for one shard: strided, so shards are disjoint, cover every row, and differ
    in size by at most one."""
    return list(range(shard_index, num_rows, num_shards))


def heldout_passes(
    temperature: float, num_samples: int | None, ks: Sequence[int], sample_temperature: float
) -> tuple[Pass, Pass | None]:
    """The score pass (greedy: 1 sample; sampled: `num_samples`, default 1) and the pass@k pass
    (`num_samples`, default the largest k, at `sample_temperature`; None without `ks`)."""
    score = (1 if temperature <= 0 else num_samples or 1, temperature)
    sampled = (num_samples or max(ks), sample_temperature) if ks else None
    return score, sampled
