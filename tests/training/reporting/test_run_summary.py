"""Issue 35 item 8: a run ends with where its time went and its token rates, and a CPU's MFU
divides by one peak per machine (the best measured there), not by each process's own.

On main a run ended with `done: N steps in T` only, and the CPU peak was measured afresh per
process (0.033-0.173 TFLOPS with the load on the project's machine), so CPU MFU moved with load.
"""

from __future__ import annotations

import json
import re

import pytest

import gspo_trl.core.metric_names as names
from gspo_trl.config.recipe import load_recipe
from gspo_trl.model.sizing.cpu_peak import CACHE_FILE, machine_cpu_peak
from gspo_trl.training.build import train_recipe
from gspo_trl.training.reporting.run_summary import RunTotals, summary_lines
from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)
from tests._paths import ROOT


def _final(**seconds: float) -> dict:
    return {"train_runtime": sum(seconds.values()), **{names.perf_total(p): s for p, s in seconds.items()}}


@pytest.mark.parametrize(
    ("final", "windows", "processes", "expected"),
    [
        (
            _final(generation=46.0, update=31.0, old_logprobs=9.0, rewards=2.0, other=12.0, checkpoint=0.1),
            [{names.PERF_WALL: 10.0, names.PERF_GENERATED_TOKENS: 800.0, names.PERF_TRAINED_TOKENS: 1600.0}],
            1,
            [
                "time     generation 46% | update 31% | old_logprobs 9% | rewards 2% | other 12% (of 1m40s)",
                "tokens   80 generated tok/s, 160 trained tok/s per process (over the logged windows)",
            ],
        ),
        (_final(update=1.0), [{names.PERF_WALL: 2.0, names.PERF_GENERATED_TOKENS: 40.0}], 2, None),
        ({"train_runtime": 1.0}, [], 1, []),
    ],
)
def test_summary_lines(final, windows, processes, expected) -> None:
    totals = RunTotals()
    for window in windows:
        totals.add(window)
    lines = summary_lines(final, totals, processes)
    if expected is None:  # two processes: the rate is per process, as the step line's
        assert lines[0].startswith("time     update 100%") and "10 generated tok/s" in lines[1], lines
    else:
        assert lines == expected


def test_the_cpu_peak_is_the_best_measured_on_the_machine(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GSPO_TRL_CACHE", str(tmp_path / "cache"))
    seen = []
    for measured in (0.05, 0.02, 0.1, 0.07):
        seen.append(machine_cpu_peak(1, lambda threads, m=measured: m))
    assert [peak for peak, _ in seen] == [0.05, 0.05, 0.1, 0.1]  # a busy measurement does not lower it
    assert "best of 4 measured on this machine" in seen[-1][1]
    kept = json.loads((tmp_path / "cache" / CACHE_FILE).read_text())
    assert [entry["best_tflops"] for entry in kept.values()] == [0.1]
    assert machine_cpu_peak(2, lambda threads: 0.03)[0] == 0.03  # another thread count: its own figure


def test_an_unwritable_cache_falls_back_and_says_so(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GSPO_TRL_CACHE", str(blocker / "cache"))  # under a file: cannot be made
    peak, source = machine_cpu_peak(1, lambda threads: 0.04)
    assert peak == 0.04 and "not comparable between runs" in source


@pytest.mark.slow
def test_a_run_ends_with_its_phases_and_token_rates(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("GSPO_TRL_CACHE", str(tmp_path / "cache"))
    fast = {"max_steps": 4, "per_device_train_batch_size": 8, "num_generations": 4, "logging_steps": 2}
    fast.update({"max_completion_length": 8, "data.num_rows": 64, "data.eval_size": 8})
    fast["output_dir"] = str(tmp_path / "run")
    train_recipe(load_recipe(ROOT / "recipes" / "tiny" / "reversal.yaml", fast))
    out = capsys.readouterr().out
    time_line = next(line for line in out.splitlines() if line.startswith("time     "))
    shares = dict(re.findall(r"(\w+) (\d+)%", time_line))
    assert {"generation", "update"} <= set(shares) and 95 <= sum(map(int, shares.values())) <= 105, time_line
    assert re.search(r"^tokens   [\d,]+ generated tok/s, [\d,]+ trained tok/s per process", out, re.M), out
    assert "best of 1 measured on this machine" in out  # the banner's perf line names the peak's source
