"""scripts/bench_packing.py: its completion lengths are long-tailed over [5, MAX_LEN], its table
reads its rows, and one tiny packed-and-padded pair trains end to end and prints the ratio line."""

from __future__ import annotations

import statistics

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401
from tests._scripts import load_script

bench = load_script("bench_packing")


def test_completion_lengths_are_long_tailed_between_5_and_the_cap():
    lengths = [bench.completion_length(p, i, 0) for p in bench.PROMPTS[:64] for i in range(8)]
    assert min(lengths) == 5 and max(lengths) == bench.MAX_LEN
    assert 15 <= statistics.median(lengths) <= 40  # most short, a few at the cap
    assert sum(n >= 100 for n in lengths) >= 0.05 * len(lengths)


def test_the_table_reads_its_rows_and_the_ratio_row_divides_medians():
    rows = [
        {"task": "dense", "seed": s, "arm": arm, "update_s": t, "old_logprobs_s": t / 2, "held_out": 0.5,
         "token_fraction": f, "tokens_per_update": 1000 * f}
        for s in (0, 1, 2)
        for arm, t, f in (("padded", 2.0 + s, 1.0), ("packed", 1.0 + s, 0.25))
    ]  # fmt: skip
    text = bench.table(rows)
    assert "| dense | packed / padded | 0.25 | 0.67 | 0.67 | |" in text


@pytest.mark.slow
def test_a_short_pair_of_runs_prints_the_update_time_ratio(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "MAX_LEN", 24)
    assert bench.main(["--tasks", "dense", "--seeds", "0", "--steps", "4", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    ratio = float(out.split("update time packed / padded: ")[1].split()[0])
    assert 0 < ratio < 1.5
    runs = [line for line in (tmp_path / "runs.jsonl").read_text().splitlines() if line]
    assert len(runs) == 2 and '"arm": "packed"' in runs[1]
