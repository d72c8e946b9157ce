"""The plan against a measurement: the tiny model's real training step on CPU (scripts/bench_plan_memory.py).

Measured on the 2-core CPU worker (load ~14), 16 x 512 tokens, fp32, right-padded rows, AdamW's
moments allocated by a warm-up step: 158.7 MiB measured vs 175.7 MiB planned with gradient
checkpointing (ratio 0.90), 425.3 vs 396.0 MiB without (1.07). The band holds the plan within
15% under the measurement and 20% over it.

The test process holds 1 GiB resident while it measures, as a long test session does: a child's
getrusage peak included its parent's (Linux carries it across exec), which read 2.2x the plan in
the full suite; the child's own VmHWM, reset before the step, does not.
"""

from __future__ import annotations

import resource

import pytest

from tests._paths import ROOT
from tests._scripts import load_script

SCRIPT = ROOT / "scripts" / "bench_plan_memory.py"
BALLAST = 1 << 30


@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", [True, False])
def test_tiny_model_step_memory_is_within_15_percent_of_the_plan(tmp_path, checkpointing):
    from gspo_trl.model.tiny.dense import save_tiny_model

    bench = load_script("bench_plan_memory")
    model_dir = str(save_tiny_model(tmp_path / "tiny"))
    ballast = bytearray(BALLAST)
    ballast[:: resource.getpagesize()] = b"\1" * (BALLAST // resource.getpagesize())  # resident
    row = bench.measure(model_dir, batch=16, prompt=64, completion=448, checkpointing=checkpointing)
    del ballast
    print(
        f"measured {row['measured'] / 2**20:.1f} MiB, plan {row['predicted'] / 2**20:.1f} MiB, "
        f"ratio {row['ratio']:.2f}"
    )
    assert 0.8 < row["ratio"] < 1.15, row
