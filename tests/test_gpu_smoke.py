"""scripts/gpu_smoke.py's logic on CPU: `--dry-run` runs its three real trainer runs on the tiny model,
one step each, and must never touch CUDA (the smoke test itself needs a GPU; see docs/plan.md)."""

from __future__ import annotations

import json

import pytest
import torch

from tests._paths import ROOT
from tests._scripts import load_script

SCRIPT = ROOT / "scripts" / "gpu_smoke.py"
CUDA_CALLS = (
    "synchronize",
    "reset_peak_memory_stats",
    "max_memory_allocated",
    "empty_cache",
    "get_device_name",
)
"""torch.cuda's calls the GPU scripts make (tests/test_gpu_bench.py refuses them too)."""


@pytest.mark.slow
def test_dry_run_trains_each_run_once_without_cuda(tmp_path, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("gpu_smoke --dry-run called CUDA")

    for name in CUDA_CALLS:
        monkeypatch.setattr(torch.cuda, name, refuse)
    smoke = load_script("gpu_smoke")
    assert smoke.main(["--dry-run", "--output-dir", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert [r["run"] for r in results] == [run.name for run in smoke.RUNS]
    for row in results:
        assert row["measured_peak_bytes"] is None
        assert len(row["step_seconds"]) == 1
        assert row["planned_peak_bytes"] > 0
        assert "activations" in row["planned_terms"]
    full, lora = results[0]["planned_terms"], results[1]["planned_terms"]
    assert lora["optimizer (AdamW, 2 moments)"] < full["optimizer (AdamW, 2 moments)"]  # adapters only
    out = capsys.readouterr().out
    assert "GSPOTrainer / GRPOTrainer step time (same settings):" in out
    assert out.count("n/a (dry)") == 3
