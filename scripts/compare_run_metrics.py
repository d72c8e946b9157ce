"""Run a recipe with overrides, or compare two runs' metrics.jsonl: the proof that a refactor moved
code without changing what a run computes.

    python scripts/compare_run_metrics.py run recipes/tiny/reversal.yaml OUT -- --max_steps 8 --seed 3
    python scripts/compare_run_metrics.py run RECIPE OUT --tiny-moe -- --moe.routing_replay old
    python scripts/compare_run_metrics.py compare BEFORE/metrics.jsonl AFTER/metrics.jsonl

`run` launches `gspo-trl train` in a subprocess (set PYTHONPATH to the checkout under test);
`--tiny-moe` first builds a tiny Qwen3-MoE under OUT/tiny-moe and points `model.name_or_path` at it.
`compare` requires the same log events (lines), the same keys in each, and every number equal
within `--rtol`/`--atol`, except the keys in `WALL_CLOCK_KEYS`. It prints one line per
difference and exits 1 on any.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

WALL_CLOCK_KEYS = re.compile(
    # seconds per phase and wall seconds (gspo_trl.core.metric_names.perf_seconds)
    r"^(?:perf/(?:total/)?\w+_s"
    r"|perf/(?:trained_)?tokens_per_s|perf/mfu"  # a count divided by those seconds
    r"|train_runtime|train_(?:samples|steps)_per_second"  # transformers' end-of-run timing
    r"|step_time"  # TRL's seconds per optimizer step
    r"|heldout/seconds)$"  # held-out pass seconds
)
"""Keys measured by the clock: two runs of the same code never agree on them. Their presence is
still compared (same keys); only their values are skipped."""


def compare(before: Path, after: Path, rtol: float, atol: float) -> list[str]:
    """One line per difference between two metrics.jsonl files (empty: the same run)."""
    old = [json.loads(line) for line in before.read_text(encoding="utf-8").splitlines() if line.strip()]
    new = [json.loads(line) for line in after.read_text(encoding="utf-8").splitlines() if line.strip()]
    problems = []
    if len(old) != len(new):
        problems.append(f"{len(old)} log events before, {len(new)} after")
    for index, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a.keys() != b.keys():
            problems.append(
                f"line {index}: keys only before {sorted(a.keys() - b.keys())}, "
                f"only after {sorted(b.keys() - a.keys())}"
            )
        for key in sorted(a.keys() & b.keys()):
            if WALL_CLOCK_KEYS.match(key):
                continue
            x, y = a[key], b[key]
            if isinstance(x, int | float) and isinstance(y, int | float) and not isinstance(x, bool):
                if not math.isclose(x, y, rel_tol=rtol, abs_tol=atol):
                    problems.append(f"line {index} (step {a.get('step')}): {key}: {x!r} != {y!r}")
            elif x != y:
                problems.append(f"line {index} (step {a.get('step')}): {key}: {x!r} != {y!r}")
    return problems


def run(recipe: str, out: Path, tiny_moe: bool, overrides: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    extra = []
    if tiny_moe:
        from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe

        spec = TinyMoeSpec(
            num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2
        )
        extra = ["--model.name_or_path", str(save_tiny_moe(out / "tiny-moe", spec))]
    command = [
        sys.executable,
        "-m",
        "gspo_trl",
        "train",
        recipe,
        "--output_dir",
        str(out / "run"),
        *extra,
        *overrides,
    ]
    print(" ".join(command), flush=True)
    return subprocess.run(command, env=os.environ.copy(), check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="gspo-trl train RECIPE into OUT/run with overrides")
    run_parser.add_argument("recipe")
    run_parser.add_argument("out", type=Path)
    run_parser.add_argument("--tiny-moe", action="store_true", help="build and train a tiny Qwen3-MoE")
    compare_parser = sub.add_parser("compare", help="compare two metrics.jsonl files")
    compare_parser.add_argument("before", type=Path)
    compare_parser.add_argument("after", type=Path)
    compare_parser.add_argument("--rtol", type=float, default=1e-6)
    compare_parser.add_argument("--atol", type=float, default=1e-9)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    if args.command == "run":  # everything after `--` goes to gspo-trl train as recipe overrides
        return run(args.recipe, args.out, args.tiny_moe, argv[split + 1 :])
    problems = compare(args.before, args.after, args.rtol, args.atol)
    for line in problems:
        print(line)
    lines = sum(1 for line in args.before.read_text(encoding="utf-8").splitlines() if line.strip())
    print(f"{'DIFFERENT' if problems else 'identical'}: {lines} log events, wall-clock keys skipped")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
