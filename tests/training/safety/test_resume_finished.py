"""`--resume` never trains past a run's end, refuses a different run without its run.json, and
applies the logging interval it calls fine to change (issue 30.4, issue 35.1).

Each scenario runs `gspo-trl train` on a copy of one real finished 4-step run (checkpoint-2,
checkpoint-4, the final model). The old code trained step 5 on every `--resume` of it (writing
checkpoint-5 and a new final model), also with `--max_steps 2`; trained on with a changed
num_generations once run.json was gone; and logged at the checkpoint's old interval.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from tests._gspo_helpers import tiny_model_dir
from tests.training.safety.test_faults import FINISHED, global_step, metrics_steps, snapshot
from tests.training.test_distributed import write_mini_recipe


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(recipe, run dir) of one real 4-step run (test_faults' FINISHED), copied by each test."""
    root = tmp_path_factory.mktemp("finished")
    recipe = write_mini_recipe(root, tiny_model_dir(root))
    out = root / "run"
    assert gspo_trl_main(["train", str(recipe), "--output_dir", str(out), *FINISHED]) == 0
    return recipe, out


def _copy(finished: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    return run


def _train(recipe: Path, run: Path, *extra: str) -> int:
    return gspo_trl_main(["train", str(recipe), "--output_dir", str(run), *extra])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "extra"),
    [("the same settings", []), ("max_steps lowered below the run's step", ["--max_steps", "2"])],
)
def test_resume_of_a_finished_run_says_it_is_complete_and_writes_nothing(
    finished_run,
    tmp_path,
    caplog,
    case,
    extra,
) -> None:
    recipe, finished = finished_run
    run = _copy(finished, tmp_path)
    before = snapshot(run)
    argv = [*FINISHED, "--resume", *extra]
    with caplog.at_level("INFO"):
        assert _train(recipe, run, *argv) == 0
    assert f"--resume: {run} is complete: checkpoint-4 is at step 4 and max_steps is" in caplog.text
    assert f"its final model is in {run}" in caplog.text and "raise max_steps above 4" in caplog.text
    assert snapshot(run) == before, "a finished run was trained on or rewritten"


@pytest.mark.slow
def test_resume_with_max_steps_raised_trains_on_to_it(finished_run, tmp_path) -> None:
    recipe, finished = finished_run
    run = _copy(finished, tmp_path)
    assert _train(recipe, run, *FINISHED, "--resume", "--max_steps", "6") == 0
    assert global_step(run) == 6 and (run / "checkpoint-6").is_dir()
    assert metrics_steps(run) == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_resume_without_run_json_reads_the_checkpoint_settings_and_refuses_a_different_run(
    finished_run,
    tmp_path,
    capsys,
) -> None:
    recipe, finished = finished_run
    run = _copy(finished, tmp_path)
    (run / "run.json").unlink()
    shutil.rmtree(run / "checkpoint-4")  # an unfinished run: the refusal, not the completion, must stop it
    before = snapshot(run)
    assert _train(recipe, run, *FINISHED, "--resume", "--num_generations", "2") == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert "is a different run: num_generations (4 -> 2)" in errors[0], errors[0]
    assert snapshot(run) == before


@pytest.mark.slow
def test_a_changed_logging_steps_is_applied_on_resume(finished_run, tmp_path) -> None:
    recipe, finished = finished_run
    run = _copy(finished, tmp_path)
    shutil.rmtree(run / "checkpoint-4")  # resume from checkpoint-2, logged every step before
    assert _train(recipe, run, *FINISHED, "--resume", "--logging_steps", "2") == 0
    assert global_step(run) == 4
    assert metrics_steps(run) == [1, 2, 3, 4, 4], "steps 3-4 were logged at the checkpoint's interval (1)"
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["logging_steps"] == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "damage", "argv", "words"),
    [
        (
            "run.json keys not a mapping, --resume",
            lambda run: (run / "run.json").write_text('{"keys": [1, 2]}'),
            ["--resume"],
            ["run.json is unreadable", "not a mapping", "--overwrite"],
        ),
        (
            "run.json a directory, --overwrite",
            lambda run: ((run / "run.json").unlink(), (run / "run.json").mkdir()),
            ["--overwrite"],
            ["cannot write", "run.json"],
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_malformed_run_json_is_one_line(finished_run, tmp_path, capsys, case, damage, argv, words) -> None:
    recipe, finished = finished_run
    run = _copy(finished, tmp_path)
    damage(run)
    assert _train(recipe, run, *FINISHED, *argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err[-3000:]
    for word in words:
        assert word in errors[0], errors[0]
