"""The combination matrix (docs/combinations.md): every cell of the pairwise covering array over
gspo_trl.diagnose.combinations.FACTORS, asked of validate, plan and GSPOConfig (they must agree),
and every accepted cell a CPU can train run for real: `gspo-trl train` on the tiny dense or MoE
model, 2 optimizer steps, with its invariants checked (exit 0, finite loss, the metrics its
capabilities log). Cells that need vLLM, DeepSpeed, 2 ranks or fp16 are listed as not run here.

    python scripts/combination_matrix.py [--quick] [--out DIR]

`--quick` (the smoke test's mode): the refusal side of every cell and one training cell.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from gspo_trl.diagnose.combinations import FACTORS, Cell, covering_array, cpu_factors, override_argv, refusals

RECIPE = "recipes/tiny/reversal.yaml"
TRAIN_FLAGS = [
    "--max_steps",
    "2",
    "--logging_steps",
    "1",
    "--heldout.max_rows",
    "4",
    "--heldout.every_steps",
    "2",
]
TRAIN_FLAGS += ["--data.num_rows", "256", "--data.eval_size", "16", "--per_device_eval_batch_size", "16"]
EXPECTED_METRICS = {"dynamic_sampling": ("on", "gspo/dynamic/keep_rate")}
"""Per factor: the level whose run must log the metric."""


def models(root: Path) -> dict[str, str]:
    """The tiny dense model and a tiny MoE under `root`, built once."""
    from gspo_trl.model.tiny.dense import save_tiny_model
    from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe

    dense, moe = root / "dense", root / "moe"
    if not (dense / "config.json").exists():
        save_tiny_model(dense)
    if not (moe / "config.json").exists():
        spec = TinyMoeSpec(
            num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2
        )
        save_tiny_moe(moe, spec)
    return {"dense": str(dense), "moe": str(moe)}


def plan_errors(argv: list[str]) -> list[str] | None:
    """`gspo-trl plan ARGV` run in-process: None when it plans (exit 0 or 1), else its error lines."""
    import contextlib
    import io

    from gspo_trl.cli.main import main as gspo_trl_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = gspo_trl_main(["plan", *argv])
    if code in (0, 1):
        return None
    lines = [
        line.removeprefix("error: ") for line in err.getvalue().splitlines() if line.startswith("error: ")
    ]
    return [line.split(": ", 1)[1] if line.split(" ", 1)[0].endswith(".yaml:") else line for line in lines]


def train_cell(cell: Cell, model_dirs: dict[str, str], out: Path) -> str | None:
    """Train the cell for 2 steps; None when its invariants hold, else what broke."""
    overrides = {**cell.overrides, "model.name_or_path": model_dirs["moe" if cell.moe else "dense"]}
    argv = [sys.executable, "-m", "gspo_trl", "train", RECIPE, *override_argv(overrides), *TRAIN_FLAGS]
    argv += ["--output_dir", str(out), "--overwrite"]
    result = subprocess.run(["timeout", "600", *argv], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return f"exit {result.returncode}: {result.stderr.strip().splitlines()[-1:]}"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    losses = [row["loss"] for row in rows if "loss" in row]
    if len(losses) < 2 or not all(math.isfinite(x) for x in losses):
        return f"losses {losses}: expected 2 finite"
    for factor, (level, metric) in EXPECTED_METRICS.items():
        if cell.levels[factor] == level and not any(metric in row for row in rows):
            return f"{factor}={level} logged no {metric}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="refusals of every cell, one training cell")
    parser.add_argument("--out", default="runs/combination_matrix")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    model_dirs = models(out / "models")
    full = covering_array()
    cpu = covering_array(cpu_factors())
    cells = full + cpu
    product = math.prod(len(f.levels) for f in FACTORS)
    print(f"{len(FACTORS)} factors: {len(full)} cells cover every pair (full product {product}); "
          f"{len(cpu)} more cover every pair of the levels a CPU trains")  # fmt: skip
    failed, trained, not_run = 0, 0, 0
    for index, cell in enumerate(cells):
        verdicts = refusals(cell, RECIPE, model_dirs, plan_errors)
        problem = verdicts.disagreement()
        outcome = "refused" if verdicts.validate is not None else "accepted"
        if problem is None and verdicts.validate is None:
            if cell.cpu and (not args.quick or trained == 0):
                problem = train_cell(cell, model_dirs, out / f"cell{index}")
                trained += 1
                outcome = "trained"
            else:
                not_run += 1
                outcome = "accepted (needs GPU/vLLM/2 ranks: not trained here)"
        failed += problem is not None
        print(f"cell {index:2d} {'FAIL' if problem else 'ok  '} {outcome}: {cell.name or '(defaults)'}")
        if problem:
            print(f"        {problem}")
    seconds = time.monotonic() - start
    print(f"{len(cells)} cells: {failed} failed, {trained} trained, {not_run} accepted but not trained here; "
          f"{seconds:.0f} s")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
