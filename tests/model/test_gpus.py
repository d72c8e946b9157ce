"""One table of GPU rates: the plan's priced GPUs and a run's MFU peak read the same rows."""

from __future__ import annotations

import pytest

from gspo_trl.model.sizing.flops import datasheet_peak_tflops
from gspo_trl.model.sizing.gpu_rates import GPU_RATES, rates_named, rates_of_device
from gspo_trl.plan.gpu_prices import GPU_TYPES


@pytest.mark.parametrize(
    ("device_name", "row"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200-NVL"),  # main read it as the SXM part: MFU 989/835.5 = 1.18x low
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA L40", None),
        ("Tesla T4", None),
    ],
)
def test_a_device_name_finds_its_own_row(device_name: str, row: str | None) -> None:
    found = rates_of_device(device_name)
    assert (found.name if found else None) == row
    assert datasheet_peak_tflops(device_name) == (found.bf16_dense_tflops if found else None)


def test_every_priced_gpu_has_the_rates_of_its_row() -> None:
    for gpu in GPU_TYPES:
        rates = rates_named(gpu.name)
        assert (gpu.bf16_dense_tflops, gpu.bandwidth_tb_s, gpu.rates_source, gpu.memory_gb) == (
            rates.bf16_dense_tflops,
            rates.bandwidth_tb_s,
            rates.source,
            rates.memory_gb,
        )
    assert len({row.name for row in GPU_RATES}) == len(GPU_RATES)


def test_measuring_the_cpu_peak_leaves_the_global_rng_alone():
    """The MFU's CPU peak is measured when the first trainer of a process logs; drawing its matrices
    from the global RNG made that trainer sample differently from later ones with the same seed."""
    import torch

    from gspo_trl.model.sizing.flops import measured_cpu_peak_tflops

    torch.manual_seed(0)
    state = torch.get_rng_state()
    assert measured_cpu_peak_tflops.__wrapped__(1, seconds=0.01) > 0
    assert torch.equal(torch.get_rng_state(), state)
