"""`gspo-trl plan`'s first fix as paste-ready recipe overrides, the LoRA learning-rate note, and
one labelled line for the run's hours and cost (issue 35 item 9)."""

from __future__ import annotations

import re
import shlex

import pytest

from gspo_trl.cli.main import main as gspo_trl_main


def run_plan(capsys, *argv: str) -> str:
    gspo_trl_main(["plan", *argv])
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "lora"),
    [
        (["qwen3-4b/math-lora", "--per_device_train_batch_size", "32", "--steps_per_generation", "4",
          "--gradient_accumulation_steps", "1"], False),  # tight: smaller micro-batches
        (["qwen3-8b/math", "--gpu-memory", "24"], True),  # smaller batches, then LoRA
    ],
)  # fmt: skip
def test_pasted_overrides_make_the_plan_fit(capsys, argv, lora):
    before = run_plan(capsys, *argv)
    assert "Verdict: FITS" not in before
    flags = re.search(r"^  as overrides: (.+)$", before, re.MULTILINE)
    assert flags, before
    overrides = shlex.split(flags.group(1))
    assert len(overrides) == len({flag for flag in overrides if flag.startswith("--")}) * 2  # each key once
    assert ("--model.lora" in overrides) == lora
    assert ("learning_rate" in before and "LoRA usually wants ~10x" in before) == lora
    if lora:
        assert overrides[overrides.index("--learning_rate") + 1] == "1e-05"  # 10 x the recipe's 1e-6
    after = run_plan(capsys, *argv, *overrides)
    assert "Verdict: FITS" in after, after


def test_hours_and_cost_in_one_labelled_line(capsys):
    """The floor and the recipe's own estimate, side by side in the report's last line (the
    launch command follows it)."""
    out = run_plan(capsys, "qwen3-4b/math-lora")
    summary = [line for line in out.splitlines() if line.startswith("Run time and cost:")]
    report = out.split("\nLaunch")[0]
    assert len(summary) == 1 and report.rstrip().endswith(summary[0])
    floor = re.search(r"^  total\s+([\d.]+) h$", out, re.MULTILINE).group(1)
    assert f"floor {floor} h ~$" in summary[0]
    assert "recipe's estimate (launch.seconds_per_step) 15-20 h ~$45-$60" in summary[0], summary[0]
