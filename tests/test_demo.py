"""`make demo` for real (the `demo_run` fixture in conftest.py): GSPO lifts held-out accuracy,
and the report and eval tools work on its output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

MIN_GAIN = 0.25


@pytest.mark.slow
@pytest.mark.timeout(1800)  # includes the session's one demo run (demo_run fixture)
def test_demo_learns(demo_run: Path) -> None:
    results = json.loads((demo_run / "results.json").read_text())
    assert results["heldout_accuracy_after"] - results["heldout_accuracy_before"] >= MIN_GAIN, results
    assert results["train_reward_last"] > results["train_reward_first"], results
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(demo_run / "gspo")  # the saved model loads
    png = (demo_run / "reward_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


@pytest.mark.slow
@pytest.mark.timeout(1800)  # includes the session's one demo run (demo_run fixture)
def test_report_on_the_demo_run(demo_run: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gspo_trl.cli", "report", str(demo_run / "gspo")],
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
@pytest.mark.timeout(1800)  # includes the session's one demo run (demo_run fixture)
def test_eval_reproduces_the_demo_accuracy(demo_run: Path, tmp_path: Path) -> None:
    results = json.loads((demo_run / "results.json").read_text())
    output = tmp_path / "eval.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gspo_trl.cli",
            "eval",
            str(demo_run / "gspo"),
            "--data",
            str(demo_run / "heldout.jsonl"),
            "--reward",
            "gspo_trl.synthetic:exact_match",
            "--k",
            "1",
            "--max-new-tokens",
            "12",
            "--engine",
            "hf",
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    evaluation = json.loads(output.read_text())
    greedy = evaluation["results"]["greedy"]["pass@1"]
    assert greedy == pytest.approx(results["heldout_accuracy_after"], abs=1e-9), evaluation
