"""`gspo-trl plan` compares like with like: the recipe's stated time with its own hardware's floor.

CLI output only (no new imports), so this file runs unchanged against older code: there it fails,
because the old report divided the `launch:` hardware's seconds per step by the floor of whatever
hardware was planned, and printed no hours or cost for the whole run.
"""

from __future__ import annotations

import re

from gspo_trl.cli.main import main as gspo_trl_main

RECIPE = "qwen3-1.7b/math"
RATIO = re.compile(r"(\d+(?:-\d+)?)x the floor")
COST = re.compile(r"  cost ~\$[\d,.]+ \(8 GPU\(s\) x ([\d.]+) h x \$[\d.]+/GPU-h, price: H100: ")


def run_plan(capsys, *argv: str) -> str:
    assert gspo_trl_main(["plan", *argv]) in (0, 1)
    return capsys.readouterr().out


def test_the_recipes_stated_time_is_compared_on_its_own_hardware(capsys):
    """launch.seconds_per_step is for the `launch:` hardware (8 x H100 here). Planned on 1 x 24 GB,
    the multiple of the floor must be the one the launch: hardware gives, that hardware named, and
    the rollout batch the same there and here (512 completions: the plan raises accumulation on the
    one GPU rather than shrink it to 64, and says so first)."""
    own = run_plan(capsys, RECIPE)
    other = run_plan(capsys, RECIPE, "--gpus-per-node", "1", "--gpu-memory", "24GB")
    assert RATIO.findall(own) and RATIO.findall(other) == RATIO.findall(own)
    assert "The recipe's launch: hardware, for comparison (1 node(s) x 8 x H100 80 GB;" in other
    assert "(1 node(s) x 8 x H100 80 GB; the same rollout batch)" in other
    assert "  changed   rollout batch kept at 512 completions" in other
    header_floor = re.search(r"whole-run floor ([\d.]+) h", other)
    own_cost = COST.search(own)
    assert header_floor and own_cost and header_floor.group(1) == own_cost.group(1)


def test_one_gpu_of_24_gb_is_timed_and_priced_as_one(capsys):
    """Not at H100 rates without saying so: the 24 GB card's own rates and price, both named."""
    other = run_plan(capsys, RECIPE, "--gpus-per-node", "1", "--gpu-memory", "24GB")
    assert "GPU type  A10G (assumed from 24 GB; give --gpu-type)" in other
    assert "floor at 125 TFLOP/s per GPU" in other and "generation floor at 0.6 TB/s" in other
    assert re.search(r"  cost ~\$[\d,.]+ \(1 GPU\(s\) x [\d.]+ h x \$1\.01/GPU-h, price: A10G: AWS", other)
