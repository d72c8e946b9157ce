"""How long a user waits for a recipe mistake to be refused (goal: <= 3 s on 2 cores).

Runs `gspo-trl validate` on the tiny recipe with a mistyped key, a bad value and an
impossible batch, each `--repeats` times in fresh processes, next to `python -c pass` as the
interpreter's own start-up, and prints the median wall times and their ratio. Reading a
recipe imports neither torch nor TRL (the GRPOConfig fields come from a snapshot), which is
what keeps this short.

    python scripts/bench_refusal.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GSPO_TRL = Path(sys.executable).parent / "gspo-trl"
RECIPE = str(ROOT / "recipes" / "tiny" / "reversal.yaml")
CASES = {
    "unknown key": ["--lerning_rate", "1e-5"],
    "bad value": ["--learning_rate", "-1"],
    "batch": ["--num_generations", "3"],
}


def median_seconds(command: list[str], repeats: int, expect: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
        if result.returncode != expect:
            raise SystemExit(f"{command}: exit {result.returncode}, expected {expect}\n{result.stderr}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    baseline = median_seconds([sys.executable, "-c", "pass"], args.repeats, 0)
    print(f"python -c pass: {baseline:.2f} s (median of {args.repeats})")
    for name, overrides in CASES.items():
        seconds = median_seconds([str(GSPO_TRL), "validate", RECIPE, *overrides], args.repeats, 2)
        print(f"refused ({name}): {seconds:.2f} s, {seconds / baseline:.1f}x python start-up")


if __name__ == "__main__":
    main()
