"""GPU types the plan times and prices: peak bf16 rate, memory bandwidth, and a price per GPU-hour.

The rates (dense bf16 peak, memory bandwidth) are gspo_trl.model.sizing.gpu_rates's rows, the one table of
them, which a run's MFU reads too; this module adds a price to the GPUs the plan prices. The
prices are on-demand list prices as recalled from each row's named provider and date: a stated
assumption, not a quote fetched by this code (nothing here goes on the network). Prices move
and differ by provider, region, commitment and spot market, so pass
`gspo-trl plan --gpu-price USD_PER_GPU_HOUR` for your own.
docs/plan.md prints this table (`price_table_markdown`; a test keeps the two equal).
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo_trl.model.sizing.gpu_rates import rates_named
from gspo_trl.plan.model_shape import PlanError


@dataclass(frozen=True)
class GpuType:
    """One GPU model: what the plan times it at and what an hour of it costs."""

    name: str
    memory_gb: float
    """Nominal GB, as sold (the plan fills what CUDA reports:
    gspo_trl.model.sizing.gpu_rates.usable_memory_gib)."""
    bf16_dense_tflops: float
    bandwidth_tb_s: float
    rates_source: str
    usd_per_gpu_hour: float
    price_source: str
    """Provider, offer and date the price is taken from, printed beside every cost."""


PRICE_NOTE = "stated assumption, not fetched; override with --gpu-price"


def _priced(name: str, usd_per_gpu_hour: float, price_source: str) -> GpuType:
    """A row of gspo_trl.model.sizing.gpu_rates (the one table of rates) with its price."""
    rates = rates_named(name)
    return GpuType(
        rates.name, rates.memory_gb, rates.bf16_dense_tflops, rates.bandwidth_tb_s, rates.source,
        usd_per_gpu_hour, price_source,
    )  # fmt: skip


GPU_TYPES: tuple[GpuType, ...] = (
    _priced("H100", 2.99, "Lambda on-demand 8x H100 SXM, as of 2025-01"),
    _priced("H200", 3.99, "RunPod on-demand H200 SXM, as of 2025-01"),
    _priced("A100-80GB", 1.79, "Lambda on-demand 8x A100 SXM 80GB, as of 2025-01"),
    _priced("A100-40GB", 1.29, "Lambda on-demand 8x A100 SXM 40GB, as of 2025-01"),
    _priced("L40S", 0.86, "RunPod on-demand L40S, as of 2025-01"),
    _priced("A10G", 1.01, "AWS on-demand g5.xlarge (1x A10G), us-east-1, as of 2025-01"),
    _priced("RTX4090", 0.69, "RunPod on-demand RTX 4090, as of 2025-01"),
)
"""Rows, most capable first; the first row of a memory size is the one `--gpu-memory` alone picks."""

DEFAULT_GPU = GPU_TYPES[0]
"""What a plan assumes with no GPU type and no row of its memory size (it says so)."""


def _key(name: str) -> str:
    return "".join(ch for ch in name.upper() if ch.isalnum())


def find_gpu(name: str) -> GpuType | None:
    """The row for `H100`, `h100`, `A100 80GB`, `RTX 4090`; for `H100/A100` the first known part."""
    rows = {_key(gpu.name): gpu for gpu in GPU_TYPES}
    for part in str(name).split("/"):
        key = _key(part)
        if key in rows:
            return rows[key]
        if key == "A100":
            return rows["A10080GB"]
    return None


def gpu_type(name: str) -> GpuType:
    """The row for a `--gpu-type` name; refuses one the table lacks, listing those it has."""
    found = find_gpu(name)
    if found is None:
        known = ", ".join(gpu.name for gpu in GPU_TYPES)
        raise PlanError(f"--gpu-type {name!r}: the plan knows {known}; name the nearest and give --gpu-price")
    return found


def gpu_of_memory(memory_gb: float) -> GpuType | None:
    """The first row of this nominal memory size (24 -> A10G), None when the table has none."""
    return next((gpu for gpu in GPU_TYPES if gpu.memory_gb == memory_gb), None)


def price_table_markdown() -> str:
    """The table as docs/plan.md prints it."""
    lines = [
        "| GPU type | memory | bf16 dense | bandwidth | rates from | $/GPU-hour | price from |",
        "|---|---|---|---|---|---|---|",
    ]
    for gpu in GPU_TYPES:
        lines.append(
            f"| {gpu.name} | {gpu.memory_gb:g} GB | {gpu.bf16_dense_tflops:g} TFLOP/s | "
            f"{gpu.bandwidth_tb_s:g} TB/s | {gpu.rates_source} | {gpu.usd_per_gpu_hour:.2f} | "
            f"{gpu.price_source} |"
        )
    return "\n".join(lines)
