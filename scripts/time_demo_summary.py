"""The summary line of `scripts/time_demo.sh`: the line README.md quotes.

    python scripts/time_demo_summary.py FIRST_FILE REPEAT_FILE [--busy]

Each file holds one run per line, ``label seconds heldout_before heldout_after``. The line
names the machine (cores, CPU model) and its load, because a time means nothing without them;
tests/test_readme.py checks that the README's quoted line has this line's shape.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

PREFIX = "time_demo: "


def _times(rows: list[list[str]]) -> str:
    times = sorted(float(row[1]) for row in rows)
    return f"{statistics.median(times):.0f} s ({times[0]:.0f}-{times[-1]:.0f})"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return " ".join(line.split(":", 1)[1].split())
    return "unknown CPU"


def summary_line(
    first: list[list[str]], repeat: list[list[str]], cores: int, cpu: str, load: float, busy: bool
) -> str:
    """Medians (and ranges) of the first runs and the repeats, the first runs' held-out scores."""
    before = statistics.median(float(row[2]) for row in first)
    after = statistics.median(float(row[3]) for row in first)
    return (
        f"{PREFIX}first demo {_times(first)}, repeat {_times(repeat)}, held-out {before:.3f} -> "
        f"{after:.3f}; median of {len(first)}, {cores} cores ({cpu}), load {load:.1f} at the end"
        + (", one busy process beside it" if busy else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("first", type=Path)
    parser.add_argument("repeat", type=Path)
    parser.add_argument("--busy", action="store_true")
    args = parser.parse_args()
    first, repeat = (
        [line.split() for line in path.read_text().splitlines() if line.strip()]
        for path in (args.first, args.repeat)
    )
    print(summary_line(first, repeat, os.cpu_count() or 1, cpu_model(), os.getloadavg()[0], args.busy))


if __name__ == "__main__":
    main()
