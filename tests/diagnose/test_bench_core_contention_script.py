"""scripts/bench_core_contention.py: a short real run prints one line per kind in its format (the
measurement itself, minutes of pinned workers, is the script's); bad arguments are one line."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from tests._scripts import load_script

bench = load_script("bench_core_contention")
LINE = re.compile(
    r"^(python|matmul) core 0 rate together / alone per round: (\d+\.\d\d ?)+ median \d+\.\d\d$"
)


@pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2, reason="needs taskset and 2 cores"
)
def test_a_short_run_prints_one_ratio_line_per_kind(capsys):
    assert bench.main(["--rounds", "1", "--seconds", "0.2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["python", "matmul"]
    assert all(LINE.match(line) for line in lines), lines
    ratios = [float(x) for line in lines for x in line.split(": ")[1].split()[:-2]]
    assert all(0.05 < ratio < 20 for ratio in ratios)  # a rate really measured on both sides


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--seconds", "0"]])
def test_nonsense_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert "must" in capsys.readouterr().err
