"""GPU models' published rates: dense bf16 Tensor Core peak and memory bandwidth, one row each.

The one table of them: `gspo-trl plan` times work by these ceilings (gspo_trl.plan.gpus adds a
price to the rows it prices), and a run's `perf/mfu` divides by the peak of the GPU torch names
(gspo_trl.model.flops). NVIDIA's datasheets print the 2:4-sparse figure first, twice the dense
one given here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuRates:
    """One GPU model's ceilings and where they are published."""

    name: str
    memory_gb: float
    """Nominal memory (the plan reads it as GiB, like `--gpu-memory`)."""
    bf16_dense_tflops: float
    bandwidth_tb_s: float
    source: str
    device_name_parts: tuple[str, ...]
    """Every part must occur in `torch.cuda.get_device_name()` (case-insensitive) for a match."""


GPU_RATES: tuple[GpuRates, ...] = (
    GpuRates("B200", 180, 2250.0, 8.0, "NVIDIA HGX B200 datasheet (36 PFLOPS sparse per 8 GPUs)", ("B200",)),
    GpuRates("H200", 141, 989.0, 4.8, "NVIDIA H200 SXM datasheet", ("H200",)),
    GpuRates("H100-NVL", 94, 835.0, 3.9, "NVIDIA H100 NVL datasheet", ("H100", "NVL")),
    GpuRates("H100-PCIe", 80, 756.0, 2.0, "NVIDIA H100 PCIe datasheet", ("H100", "PCIe")),
    GpuRates("H100", 80, 989.0, 3.35, "NVIDIA H100 SXM datasheet", ("H100",)),
    GpuRates("A100-80GB", 80, 312.0, 2.039, "NVIDIA A100 SXM 80GB datasheet", ("A100", "80GB")),
    GpuRates("A100-40GB", 40, 312.0, 1.555, "NVIDIA A100 SXM 40GB datasheet", ("A100",)),
    GpuRates("L40S", 48, 362.0, 0.864, "NVIDIA L40S datasheet", ("L40S",)),
    GpuRates("L4", 24, 121.0, 0.3, "NVIDIA L4 datasheet", ("L4",)),
    GpuRates("A10G", 24, 125.0, 0.6, "NVIDIA A10 datasheet (AWS publishes none for its A10G)", ("A10G",)),
    GpuRates("A10", 24, 125.0, 0.6, "NVIDIA A10 datasheet", ("A10",)),
    GpuRates(
        "RTX4090", 24, 165.2, 1.008, "NVIDIA Ada (AD102) whitepaper, bf16 with fp32 accumulate", ("4090",)
    ),
)  # fmt: skip
"""Most specific first: a device name matches the first row whose parts it all contains, so
'H100 PCIe' is not read as the SXM part, nor 'A10G' as 'A10', nor 'L40S' as 'L4'."""


def rates_named(name: str) -> GpuRates:
    """The row called `name` exactly (the plan's price table refers to rows this way)."""
    return next(row for row in GPU_RATES if row.name == name)


def rates_of_device(device_name: str) -> GpuRates | None:
    """The row for a name like `torch.cuda.get_device_name()` ('NVIDIA H100 80GB HBM3'); None if
    the table has no such GPU."""
    name = device_name.lower()
    for row in GPU_RATES:
        if row.name == "L4" and "l40" in name:
            continue
        if all(part.lower() in name for part in row.device_name_parts):
            return row
    return None
