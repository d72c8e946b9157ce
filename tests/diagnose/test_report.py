"""`gspo-trl report`: PNGs from a real GSPOTrainer run's trainer_state.json, opened and checked."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PIL import Image

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.config.recipe import load_recipe
from gspo_trl.demo.pipeline import DEFAULT_RECIPE as DEMO_RECIPE
from gspo_trl.diagnose import report
from gspo_trl.training.build import train_recipe
from tests._gspo_helpers import single_torch_thread  # noqa: F401

EXPECTED = [
    "reward.png",
    "clip_by_length.png",
    "clip_by_minibatch.png",
    "log_ratio.png",
    "zero_variance.png",
    "entropy.png",
]
SIZE = (int(report.FIGSIZE_IN[0] * report.DPI), int(report.FIGSIZE_IN[1] * report.DPI))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run laid out like `make demo`'s (DEMO/gspo/trainer_state.json), made by the same code
    path (`gspo_trl.train.run` on the demo recipe), shortened: no warm start, 8 steps."""
    demo = tmp_path_factory.mktemp("demo")
    overrides = {
        "output_dir": str(demo / "gspo"),
        "max_steps": 8,
        "logging_steps": 1,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "learning_rate": 1e-3,
        "data.num_rows": 200,
        "data.eval_size": 8,
        "heldout.max_rows": 8,
        "diagnostics": {"length_buckets": [6, 10]},
    }
    train_recipe(load_recipe(DEMO_RECIPE, overrides))
    return demo


def assert_real_image(path):
    with Image.open(path) as img:
        assert img.format == "PNG"
        assert img.size == SIZE
        pixels = np.asarray(img.convert("RGB"), dtype=np.float64)
    assert pixels.std() > 10, f"{path.name} looks blank"
    colours = {tuple(p) for p in pixels.reshape(-1, 3)[::7].astype(int)}
    assert len(colours) > 20, f"{path.name} has too few colours to hold a plot"
    return pixels


@pytest.mark.slow
def test_report_on_a_demo_run_writes_all_plots_with_data(run_dir, capsys):
    assert gspo_trl_main(["report", str(run_dir)]) == 0  # `gspo-trl report runs/demo` finds runs/demo/gspo
    printed = capsys.readouterr().out
    assert "no data" not in printed
    for name in EXPECTED:
        assert_real_image(run_dir / "report" / name)
    history = report.load_log_history(run_dir)
    assert any("heldout/score" in e for e in history), "the demo recipe logs a held-out score"


def test_report_reads_the_latest_checkpoint_and_plots_heldout(tmp_path):
    history = []
    for step in range(1, 13):
        mb = (step - 1) % 4 + 1
        entry = {"step": step, "reward": 0.1 * step, "reward_std": 0.05, "entropy": 5 - 0.1 * step}
        entry["gspo/zero_variance_groups"] = 0.2
        entry[f"gspo/mb{mb}/clip/region"] = 0.0 if mb == 1 else 0.3
        if mb > 1:
            for q, v in {"p5": -1e-3, "p50": 0.0, "p95": 1e-3, "min": -2e-3, "max": 2e-3}.items():
                entry[f"gspo/offpolicy/log_ratio/{q}"] = v * step
            entry["gspo/offpolicy/clip/len_0-64"] = 0.5
            entry["gspo/offpolicy/clip/len_64-inf"] = 0.1
            entry["gspo/offpolicy/clip/region"] = 0.3
        if step % 4 == 0:
            entry["heldout/accuracy"] = 0.05 * step
        history.append(entry)
    for step, n in [(4, 4), (12, 12), (8, 8)]:  # the newest checkpoint must win, not the last listed
        ckpt = tmp_path / f"checkpoint-{step}"
        ckpt.mkdir()
        (ckpt / "trainer_state.json").write_text(json.dumps({"log_history": history[:n]}))
    written = report.write_report(tmp_path)
    assert all(written[name] for name in EXPECTED), written
    assert written["phases.png"] is None  # no perf/* keys: not written
    assert written[report.BEHAVIOUR_PNG] is None  # no engine.correction: not written
    assert report.load_log_history(tmp_path)[-1]["step"] == 12
    for name in EXPECTED:
        assert_real_image(tmp_path / "report" / name)


def test_a_resumed_runs_repeated_steps_plot_one_point_each(tmp_path, monkeypatch):
    """A run stopped at step 6, resumed from checkpoint-4: metrics.jsonl holds two held-out rows
    for step 4 (each run measured the checkpoint) and two rows for steps 5 and 6. The curve
    drew a vertical jump at step 4 and went back in steps; each step now has the last row."""
    first = [{"step": 0, "heldout/score": 0.1}]
    first += [{"step": s, "reward": 0.1 * s, "reward_std": 0.05} for s in range(1, 7)]
    first.insert(5, {"step": 4, "heldout/score": 0.3})
    resumed = [{"step": 4, "heldout/score": 0.35}]
    resumed += [{"step": s, "reward": 0.1 * s + 0.01, "reward_std": 0.05} for s in range(5, 9)]
    resumed.append({"step": 8, "heldout/score": 0.5})
    lines = [json.dumps(row) for row in first + resumed]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")

    history = report.load_log_history(tmp_path)
    assert report.series(history, "heldout/score") == ([0, 4, 8], [0.1, 0.35, 0.5])
    steps, rewards = report.series(history, "reward")
    assert steps == list(range(1, 9)) and rewards[4] == pytest.approx(0.51)

    drawn = {}
    finish = report._finish

    def recording_finish(fig, ax, path, plotted, missing):
        drawn[path.name] = [list(line.get_xdata()) for line in ax.get_lines()]
        return finish(fig, ax, path, plotted, missing)

    monkeypatch.setattr(report, "_finish", recording_finish)
    report.write_report(tmp_path)
    assert drawn["reward.png"] == [list(range(1, 9)), [0, 4, 8]], drawn["reward.png"]
    assert_real_image(tmp_path / "report" / "reward.png")


def test_missing_metrics_give_a_no_data_card_and_missing_state_an_error(tmp_path, capsys):
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.5}]}))
    assert gspo_trl_main(["report", str(tmp_path), "--out", str(tmp_path / "png")]) == 0
    assert "no data" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == sorted(EXPECTED)
    shutil.rmtree(tmp_path / "png")
    (tmp_path / "trainer_state.json").unlink()
    assert gspo_trl_main(["report", str(tmp_path)]) == 2
    assert "trainer_state.json" in capsys.readouterr().err


def test_behaviour_png_draws_the_corrections_rejected_and_truncated_shares(tmp_path):
    history = [
        {
            "step": step,
            "gspo/behaviour/rejected": 0.1 * step,
            "gspo/behaviour/truncated": 0.0,
            "gspo/behaviour/rejected/len_64-256": 0.2,
            "gspo/behaviour/rejected/len_0-64": 0.0,
        }
        for step in (4, 8)
    ]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    written = report.write_report(tmp_path)
    assert written[report.BEHAVIOUR_PNG] is True
    assert_real_image(tmp_path / "report" / report.BEHAVIOUR_PNG)
    assert report._behaviour_label("gspo/behaviour/rejected/len_64-256") == "rejected, 64-256 tokens"


def test_a_run_without_the_correction_gets_a_one_line_note(tmp_path, capsys):
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "loss": 0.5}]}))
    assert gspo_trl_main(["report", str(tmp_path)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if report.BEHAVIOUR_PNG in line]
    assert notes == [
        f"{tmp_path / 'report' / report.BEHAVIOUR_PNG}  not written: {report.BEHAVIOUR_NOT_LOGGED}"
    ]
