"""`make demo` for real (the `demo_run` fixture in conftest.py): GSPO lifts held-out accuracy,
and `gspo-trl report` works on its output (tests/eval/test_evaluate.py checks that
`gspo-trl eval` reproduces its held-out accuracy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests._demo_run import DEMO_TIMEOUT_S

MIN_GAIN = 0.5
"""GSPO lifts the demo's greedy held-out exact match by at least this much (its default warm start,
seeds 0-4: +0.84 to +0.935; docs in gspo_trl.demo.warm_start.WarmStartSettings)."""


@pytest.mark.slow
@pytest.mark.timeout(DEMO_TIMEOUT_S + 300)  # may include the session's one demo run (demo_run fixture)
def test_demo_learns(demo_run: Path) -> None:
    results = json.loads((demo_run / "results.json").read_text())
    assert results["heldout_accuracy_after"] - results["heldout_accuracy_before"] >= MIN_GAIN, results
    assert results["train_reward_last"] > results["train_reward_first"], results
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(demo_run / "gspo")  # the saved model loads
    png = (demo_run / "reward_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


@pytest.mark.slow
@pytest.mark.timeout(DEMO_TIMEOUT_S + 300)  # may include the session's one demo run (demo_run fixture)
def test_report_on_the_demo_run(demo_run: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gspo_trl.cli.main", "report", str(demo_run / "gspo")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    pngs = sorted((demo_run / "gspo" / "report").glob("*.png"))
    assert len(pngs) >= 4, pngs
    for png in pngs:
        assert png.read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
@pytest.mark.timeout(DEMO_TIMEOUT_S + 300)  # may include the session's one demo run (demo_run fixture)
def test_the_demo_log_shows_progress_through_the_warm_start(demo_run: Path) -> None:
    """`make demo > demo.log 2>&1`: the warm start prints a line every tenth, not nothing."""
    from gspo_trl.demo.pipeline import DEFAULT_SFT_STEPS

    log = (demo_run.parent.parent / "demo.log").read_text()
    lines = [line for line in log.splitlines() if line.startswith("warm-start SFT: ")]
    assert len(lines) == 10 and lines[-1].startswith(
        f"warm-start SFT: {DEFAULT_SFT_STEPS}/{DEFAULT_SFT_STEPS} step (100%)"
    ), lines
    assert "\r" not in log and "CPU threads: 1 (GSPO_TRL_CPU_THREADS=1)" in log
