"""How long a user waits for a recipe mistake to be refused, by `validate` and by `train`.

Runs `gspo-trl validate` and `gspo-trl train` on the tiny recipe with a mistyped key, a bad
value, an impossible batch and a YAML syntax error, each `--repeats` times in fresh
processes, next to `python -c pass` as the interpreter's own start-up, and prints the median
wall times, `train`'s beside `validate`'s with their ratio (goal: train within 1.5x of
validate; validate within 3 s on 2 cores). Reading a recipe imports neither torch nor TRL
(the GRPOConfig fields come from a snapshot), and `train` runs the same preflight before it
imports the training stack, which is what keeps both short.

    python scripts/bench_refusal.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GSPO_TRL = Path(sys.executable).parent / "gspo-trl"
RECIPE = str(ROOT / "recipes" / "tiny" / "reversal.yaml")
CASES = {
    "unknown key": [RECIPE, "--lerning_rate", "1e-5"],
    "bad value": [RECIPE, "--learning_rate", "-1"],
    "batch": [RECIPE, "--num_generations", "3"],
    "YAML syntax": ["BROKEN"],
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
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    baseline = median_seconds([sys.executable, "-c", "pass"], args.repeats, 0)
    print(f"python -c pass: {baseline:.2f} s (median of {args.repeats})")
    with tempfile.TemporaryDirectory() as scratch:
        broken = Path(scratch) / "broken.yaml"
        broken.write_text(
            Path(RECIPE).read_text(encoding="utf-8") + "learning_rate: [1e-6\n", encoding="utf-8"
        )
        for name, argv in CASES.items():
            argv = [str(broken) if word == "BROKEN" else word for word in argv]
            validate = median_seconds([str(GSPO_TRL), "validate", *argv], args.repeats, 2)
            train = median_seconds([str(GSPO_TRL), "train", *argv], args.repeats, 2)
            print(
                f"refused ({name}): validate {validate:.2f} s ({validate / baseline:.1f}x python start-up), "
                f"train {train:.2f} s, train/validate {train / validate:.2f}x"
            )


if __name__ == "__main__":
    main()
