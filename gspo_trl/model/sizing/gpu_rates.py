"""GPU models' published rates: dense bf16 Tensor Core peak and memory bandwidth, one row each.

The one table of them: `gspo-trl plan` times work by these ceilings (gspo_trl.plan.gpu_prices adds a
price to the rows it prices), and a run's `perf/mfu` divides by the peak of the GPU torch names
(gspo_trl.model.sizing.flops). NVIDIA's datasheets print the 2:4-sparse figure first, twice the dense
one given here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuRates:
    """One GPU model's ceilings and where they are published."""

    name: str
    memory_gb: float
    """Nominal memory in GB, as sold; `reported_gib` is what CUDA makes of it."""
    bf16_dense_tflops: float
    bandwidth_tb_s: float
    source: str
    device_name_parts: tuple[str, ...]
    """Every part must occur in `torch.cuda.get_device_name()` (case-insensitive) for a match."""
    reported_gib: tuple[float, float] | None = None
    """(low, high) GiB that CUDA reports as the card's total memory, where measured: less than
    the nominal size read as GiB (an "80 GB" H100 reports ~79.2-79.6 GiB). None: not measured."""


GPU_RATES: tuple[GpuRates, ...] = (
    GpuRates("B200", 180, 2250.0, 8.0, "NVIDIA HGX B200 datasheet (36 PFLOPS sparse per 8 GPUs)", ("B200",)),
    GpuRates("H200-NVL", 141, 835.5, 4.8, "NVIDIA H200 NVL datasheet (1,671 TFLOPS sparse)", ("H200", "NVL")),
    GpuRates("H200", 141, 989.0, 4.8, "NVIDIA H200 SXM datasheet", ("H200",), (139.8, 140.4)),
    GpuRates("H100-NVL", 94, 835.0, 3.9, "NVIDIA H100 NVL datasheet", ("H100", "NVL")),
    GpuRates("H100-PCIe", 80, 756.0, 2.0, "NVIDIA H100 PCIe datasheet", ("H100", "PCIe")),
    GpuRates("H100", 80, 989.0, 3.35, "NVIDIA H100 SXM datasheet", ("H100",), (79.2, 79.6)),
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
'H100 PCIe' is not read as the SXM part, nor 'NVIDIA H200 NVL' as the SXM H200 (whose 989 TFLOPS
would put its MFU 16% low), nor 'A10G' as 'A10', nor 'L40S' as 'L4'. The H200 NVL's total memory
as CUDA reports it is not measured: its usable figure is the H100-scaled assumption."""


REPORTED_MEMORY_SOURCE = "total memory CUDA reports on H100/H200 machines (figures given in issue 34)"
"""Where `reported_gib` comes from: measured device figures, not from a datasheet."""


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


def usable_memory_gib(nominal_gb: float, rates: GpuRates | None = None) -> tuple[float, str]:
    """(GiB a plan may fill on one GPU, what that figure is) for a card sold as `nominal_gb`.

    A measured row (`rates.reported_gib`, same nominal size) gives its low end; any other card
    gets the nominal size scaled by the H100's measured low end (79.2 of 80), an assumption the
    second element says."""
    if rates is not None and rates.reported_gib and rates.memory_gb == nominal_gb:
        low, high = rates.reported_gib
        return low, f"{rates.name} reports {low:g}-{high:g} GiB of its {nominal_gb:g} GB; the low end"
    h100 = rates_named("H100")
    assert h100.reported_gib is not None
    fraction = h100.reported_gib[0] / h100.memory_gb
    usable = round(nominal_gb * fraction, 1)
    return usable, f"assumed {fraction:.0%} of {nominal_gb:g}, as on an H100 (this card is not measured)"
