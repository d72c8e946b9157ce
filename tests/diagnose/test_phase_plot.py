"""`gspo-trl report`'s phases.png: drawn from a metrics.jsonl with perf/* keys, skipped (with a
note, no error) for a run logged before the phase timings."""

from __future__ import annotations

import json

import pytest
from PIL import Image

import gspo_trl.core.metric_names as names
from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.diagnose import phase_plot

PHASE_SECONDS = {names.PHASE_SETUP: 2.0, names.PHASE_GENERATION: 1.5, names.PHASE_REWARDS: 0.1}
PHASE_SECONDS |= {names.PHASE_OLD_LOGPROBS: 0.4, names.PHASE_UPDATE: 1.2, names.PHASE_OTHER: 0.05}


def window(step: int, with_perf: bool) -> dict:
    entry = {"step": step, "loss": 0.1, "reward": 0.05 * step, "entropy": 4.0}
    if with_perf:
        seconds = {p: (s if p != names.PHASE_SETUP or step == 2 else 0.0) for p, s in PHASE_SECONDS.items()}
        seconds[names.PHASE_HELDOUT] = 0.8 if step % 4 == 0 else 0.0
        seconds[names.PHASE_CHECKPOINT] = 0.3 if step == 8 else 0.0
        entry |= {names.perf_seconds(p): seconds.get(p, 0.0) for p in phase_plot.STACK}
        entry[names.PERF_WALL] = sum(seconds.values())
        entry[names.PERF_TRAINED_TOKENS_PER_S] = 900.0 + 10 * step
        entry[names.PERF_MFU] = 0.2 + 0.01 * step
    return entry


def write_metrics(run_dir, with_perf: bool) -> None:
    lines = [json.dumps(window(step, with_perf)) for step in range(2, 13, 2)]
    (run_dir / names.METRICS_FILE).write_text("\n".join(lines) + "\n")


def test_stack_is_every_phase_the_timer_logs():
    assert (*names.PHASES, names.PHASE_OTHER) == phase_plot.STACK


def test_a_run_with_perf_keys_gets_a_real_phases_png(tmp_path, capsys):
    write_metrics(tmp_path, with_perf=True)
    assert gspo_trl_main(["report", str(tmp_path)]) == 0
    png = tmp_path / "report" / phase_plot.PHASES_PNG
    assert f"{png}\n" in capsys.readouterr().out
    assert png.stat().st_size > 10_000
    with Image.open(png) as img:
        assert img.format == "PNG"
        assert img.size == (
            int(phase_plot.FIGSIZE_IN[0] * phase_plot.DPI),
            int(phase_plot.FIGSIZE_IN[1] * phase_plot.DPI),
        )


@pytest.mark.parametrize("history", [[], [{"step": 1, "loss": 0.5}]], ids=["empty", "no-perf-keys"])
def test_no_perf_keys_write_nothing(tmp_path, history):
    assert phase_plot.plot_phases(history, tmp_path / phase_plot.PHASES_PNG) is None
    assert not (tmp_path / phase_plot.PHASES_PNG).exists()


def test_an_older_run_gets_a_one_line_note_and_no_png(tmp_path, capsys):
    write_metrics(tmp_path, with_perf=False)
    assert gspo_trl_main(["report", str(tmp_path)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if phase_plot.PHASES_PNG in line]
    assert notes == [
        f"{tmp_path / 'report' / phase_plot.PHASES_PNG}  not written: {phase_plot.NOT_LOGGED_NOTE}"
    ]
    assert not (tmp_path / "report" / phase_plot.PHASES_PNG).exists()
    assert (tmp_path / "report" / "reward.png").is_file()
