"""`report_to` for real: TensorBoard event files and trackio's local store hold the GSPO
metrics; a tracker whose package is missing is refused by `validate`, naming the pip
package, instead of crashing `train` after the model has loaded."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import TRACKER_PACKAGES, validate
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.build import train_recipe
from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)
from tests._paths import ROOT

TINY_RECIPE = ROOT / "recipes" / "tiny" / "reversal.yaml"
FAST = {
    "max_steps": 4,
    "per_device_train_batch_size": 8,
    "num_generations": 4,
    "max_completion_length": 8,
    "data.num_rows": 64,
    "data.eval_size": 8,
    "logging_steps": 1,
}


def _installed(name: str) -> bool:
    return any(importlib.util.find_spec(module) for module in TRACKER_PACKAGES[name][0])


@pytest.mark.parametrize("tracker", sorted(TRACKER_PACKAGES))
@pytest.mark.parametrize("as_list", [False, True])
def test_validate_refuses_a_tracker_that_is_not_installed(tracker: str, as_list: bool) -> None:
    recipe = load_recipe(TINY_RECIPE, {"report_to": [tracker] if as_list else tracker})
    if _installed(tracker):
        validate(recipe, processes=1)
        return
    with pytest.raises(
        RecipeError, match=rf"report_to: '{tracker}'.*pip install {TRACKER_PACKAGES[tracker][1]}"
    ):
        validate(recipe, processes=1)


@pytest.mark.parametrize("report_to", ["none", "all", ["none"]])
def test_validate_accepts_no_tracker_and_all(report_to) -> None:
    validate(load_recipe(TINY_RECIPE, {"report_to": report_to}), processes=1)


@pytest.mark.slow
def test_tensorboard_event_files_hold_the_gspo_metrics(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="the dev extra installs tensorboard (make test)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train_recipe(load_recipe(TINY_RECIPE, {**FAST, "output_dir": str(tmp_path), "report_to": "tensorboard"}))
    event_files = sorted(tmp_path.rglob("events.out.tfevents.*"))
    assert event_files, sorted(str(p) for p in tmp_path.rglob("*"))
    tags: set[str] = set()
    for path in event_files:
        accumulator = EventAccumulator(str(path))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    assert {"train/gspo/offpolicy/clip/region", "train/reward", "train/heldout/score"} <= tags, sorted(tags)
    clip = EventAccumulator(str(event_files[0]))
    clip.Reload()
    steps = [event.step for event in clip.Scalars("train/gspo/offpolicy/clip/region")]
    assert steps == [2, 3, 4]  # mb2..mb4 are the off-policy updates of the one rollout batch
    assert [event.step for event in clip.Scalars("train/heldout/score")] == [0, 4]  # before and after


TRACKIO_RUN = """
import sys
from gspo_trl.config.recipe import load_recipe
from gspo_trl.training.build import train_recipe
overrides = {**eval(sys.argv[2]), "output_dir": sys.argv[3], "report_to": "trackio"}
train_recipe(load_recipe(sys.argv[1], overrides))
"""
"""trackio reads TRACKIO_DIR when imported: the run gets its own process and store."""


@pytest.mark.slow
def test_trackio_keeps_one_run_with_every_gspo_metric(tmp_path: Path) -> None:
    """report_to: trackio (local, no Space): one run in the local store holds the off-policy
    clip fraction of each off-policy update and the held-out score before and after training.
    The final score is logged at train end; before the held-out callback went ahead of the
    trackers' callbacks, trackio had closed the run and put it in a second run at step 0."""
    import json
    import os
    import sqlite3
    import subprocess
    import sys

    pytest.importorskip("trackio", reason="the dev extra installs trackio (make test)")
    store = tmp_path / "trackio"
    env = {**os.environ, "TRACKIO_DIR": str(store), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-c", TRACKIO_RUN, str(TINY_RECIPE), repr(FAST), str(tmp_path / "run")]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (database,) = store.glob("*.db")
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT run_name, step, metrics FROM metrics").fetchall()
    assert len({name for name, _, _ in rows}) == 1, sorted({name for name, _, _ in rows})
    steps: dict[str, list[int]] = {}  # key -> the trainer's global steps it was logged at
    for _, _, metrics in rows:  # trackio's own step column counts log calls
        logged = json.loads(metrics)
        for key in logged:  # TRL's profiling timings are logged straight to trackio, stepless
            steps.setdefault(key, []).append(logged.get("train/global_step"))
    assert steps.get("train/gspo/offpolicy/clip/region") == [2, 3, 4], sorted(steps)
    assert steps.get("train/heldout/score") == [0, 4]
    assert "train/reward" in steps and "train/gspo/offpolicy/log_ratio/std" in steps
