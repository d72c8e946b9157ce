"""Reward calls that used to end in a traceback or a hang (issue 30.8): an (n, 1) array, a
reward that changes directory, one that never returns, and Ctrl-C while one hangs.

The table runs the real wrapper on real reward functions; the runs are real `gspo-trl train`
runs on the tiny model (in this process where the reward returns, real processes where it
hangs), with the rewards in a module file the recipe names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gspo_trl.core.errors import RewardFailedError
from gspo_trl.training.safety.reward_output_checks import with_reward_checks
from tests._gspo_helpers import tiny_model_dir
from tests.training.test_distributed import start, subprocess_env, tail, wait_or_kill, write_mini_recipe

COMPLETIONS = ["12", "34", "56", "78"]
PROMPTS = ["reverse 21", "reverse 43", "reverse 65", "reverse 87"]

REWARDS = """\
import os, pathlib, threading
import numpy as np


def column(completions, **_):
    return np.ones((len(completions), 1))


def wander(completions, **_):
    os.chdir(os.environ["WANDER_TO"])
    return [min(len(c), 40) / 40.0 for c in completions]


def hang(completions, **_):
    pathlib.Path(os.environ["HANG_MARKER"]).write_text("in the reward")
    while True:
        try:
            threading.Event().wait()
        except Exception:  # a reward that swallows everything it can
            pass
"""


def _one_call(func, time_limit_s=None):
    (checked,) = with_reward_checks([func], time_limits_s=[time_limit_s])
    result = checked(prompts=PROMPTS, completions=COMPLETIONS)
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def column_array(completions, **_):
    import numpy as np

    return np.ones((len(completions), 1))


def swallowing_hang(completions, **_):
    import threading

    while True:
        with contextlib.suppress(Exception):
            threading.Event().wait()


async def async_hang(completions, **_):
    await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("func", "limit", "words"),
    [
        (column_array, None, ["'column_array'", "shape (4, 1)", "1-D array"]),
        (
            swallowing_hang,
            0.2,
            ["'swallowing_hang'", "within 0.2 s", "reverse 21", "rewards[0].time_limit_s"],
        ),
        (async_hang, 0.2, ["'async_hang'", "within 0.2 s", "reverse 21", "rewards[0].time_limit_s"]),
    ],
    ids=["(n, 1) array", "never returns", "async, never returns"],
)
def test_a_reward_call_is_refused_in_one_line_naming_the_reward(func, limit, words) -> None:
    with pytest.raises(RewardFailedError) as raised:
        _one_call(func, limit)
    assert "\n" not in str(raised.value)
    for word in words:
        assert word in str(raised.value), str(raised.value)


def test_a_reward_that_changes_directory_is_put_back_and_named(tmp_path, caplog) -> None:
    here = os.getcwd()

    def wander(completions, **_):
        os.chdir(tmp_path)
        return [1.0] * len(completions)

    with caplog.at_level(logging.WARNING):
        assert _one_call(wander) == [1.0] * 4
    assert os.getcwd() == here
    assert "reward 'wander' changed the working directory" in caplog.text


@pytest.fixture
def run_setup(tmp_path: Path) -> tuple[Path, Path]:
    recipe = write_mini_recipe(tmp_path, tiny_model_dir(tmp_path))
    (tmp_path / "faulty_rewards.py").write_text(REWARDS)
    return recipe, tmp_path / "faulty_rewards.py"


def _recipe_with(recipe: Path, reward: str) -> Path:
    text = recipe.read_text()
    start_of = text.index("rewards:")
    line = text[start_of : text.index("\n", start_of)]
    path = recipe.with_name(f"with_{reward.split(':')[-1].split(',')[0]}.yaml")
    path.write_text(text.replace(line, f"rewards: [{reward}]"))
    return path


def _train(command_dir: Path, recipe: Path, output_dir: str, **env: str) -> tuple[int, str]:
    log = command_dir / "train.log"
    command = [sys.executable, "-m", "gspo_trl.cli.main", "train", str(recipe), "--output_dir", output_dir]
    process = subprocess.run(
        [*command, "--max_steps", "2", "--steps_per_generation", "2", "--save_strategy", "no"],
        cwd=command_dir,
        env=subprocess_env(PYTHONPATH=str(Path(__file__).resolve().parents[3]), **env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    log.write_text(process.stderr)
    return process.returncode, process.stderr


def _train_here(
    recipe: Path, output_dir: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> tuple[int, str]:
    """`gspo-trl train` in this process (the CLI's own main, as tests/training/safety/test_faults.py
    runs it): a subprocess only added ~10 s of imports per run. Returns the exit status and what
    the user would read on stderr: the printed lines, then the log records (which pytest's own
    handler takes in this process). The rewards that hang stay in real processes (_train), which
    a stuck thread cannot outlive."""
    from gspo_trl.cli.main import main as gspo_trl_main

    argv = ["train", str(recipe), "--output_dir", output_dir]
    with caplog.at_level(logging.INFO):
        status = gspo_trl_main(
            [*argv, "--max_steps", "2", "--steps_per_generation", "2", "--save_strategy", "no"]
        )
    return status, capsys.readouterr().err + caplog.text


@pytest.mark.slow
def test_train_refuses_an_n_by_1_reward_in_one_line(run_setup, capsys, caplog) -> None:
    recipe, module = run_setup
    column = _recipe_with(recipe, f'"{module}:column"')
    status, err = _train_here(column, str(recipe.parent / "run"), capsys, caplog)
    assert status == 2 and "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "reward 'column' returned an array of shape (8, 1)" in errors[0], err[-3000:]


@pytest.mark.slow
def test_a_reward_that_changes_directory_does_not_move_the_run(
    run_setup, capsys, caplog, monkeypatch
) -> None:
    recipe, module = run_setup
    work, elsewhere = recipe.parent / "work", recipe.parent / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("WANDER_TO", str(elsewhere))
    status, err = _train_here(_recipe_with(recipe, f'"{module}:wander"'), "run", capsys, caplog)
    assert status == 0 and "Traceback" not in err, err[-3000:]
    assert os.getcwd() == str(work)
    assert (work / "run" / "model.safetensors").is_file() and not (elsewhere / "run").exists()
    assert "reward 'wander' changed the working directory" in err


@pytest.mark.slow
def test_a_reward_that_never_returns_stops_at_its_time_limit(run_setup) -> None:
    recipe, module = run_setup
    marker = recipe.parent / "in_reward"
    hang = f'{{name: "{module}:hang", time_limit_s: 2}}'
    status, err = _train(
        recipe.parent, _recipe_with(recipe, hang), str(recipe.parent / "run"), HANG_MARKER=str(marker)
    )
    assert status == 2 and "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    assert "reward 'hang' did not return within 2 s" in errors[0] and "rewards[0].time_limit_s" in errors[0]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_ctrl_c_stops_a_run_whose_reward_hangs(run_setup) -> None:
    """The reward blocks forever (default limit: 10 minutes); one SIGINT, sent once the
    reward is running, ends the run with exit 130 and no traceback, the lock released."""
    recipe, module = run_setup
    marker, out, log = recipe.parent / "in_reward", recipe.parent / "run", recipe.parent / "train.log"
    command = [
        sys.executable,
        "-m",
        "gspo_trl.cli.main",
        "train",
        str(_recipe_with(recipe, f'"{module}:hang"')),
    ]
    command += ["--output_dir", str(out), "--max_steps", "2", "--steps_per_generation", "2"]
    process = start(command, log, subprocess_env(HANG_MARKER=str(marker)))
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert process.poll() is None, tail(log)
        assert time.monotonic() < deadline, f"the reward was never called:\n{tail(log)}"
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.05)
    os.killpg(process.pid, signal.SIGINT)  # what the terminal sends to the foreground group
    status = wait_or_kill(process, log, 120)
    text = log.read_text()
    assert status == 130, f"exit {status} after one Ctrl-C:\n{tail(log)}"
    assert "Traceback" not in text, text[-3000:]
    assert "Ctrl-C during reward 'hang'" in text
    assert (out / ".gspo-trl.lock").read_text() == ""


def test_docs_state_the_default_time_limit() -> None:
    from gspo_trl.training.safety.reward_calls import DEFAULT_TIME_LIMIT_S

    text = (Path(__file__).resolve().parents[3] / "docs" / "rewards.md").read_text()
    assert f"reward_calls.py, {DEFAULT_TIME_LIMIT_S:g} s)" in text


def _ctrl_c_then(returns: bool):
    def reward(completions, **_):
        import threading

        os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C, delivered during the call
        if returns:
            return [0.5] * len(completions)
        threading.Event().wait()

    return reward


def test_ctrl_c_during_a_reward_lets_it_finish_within_the_grace() -> None:
    """The run's own handler (StopOnInterrupt: save at the step's end) hears the signal, and a
    reward that returns within the grace returns its scores."""
    heard = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
    try:
        assert _one_call(_ctrl_c_then(returns=True)) == [0.5] * 4
    finally:
        signal.signal(signal.SIGINT, previous)
    assert heard == [signal.SIGINT]


def test_ctrl_c_during_a_reward_that_never_returns_stops_after_the_grace(monkeypatch) -> None:
    from gspo_trl.training.safety import reward_calls
    from gspo_trl.training.safety.interrupt import TrainingInterrupted

    monkeypatch.setattr(reward_calls, "INTERRUPT_GRACE_S", 0.2)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        with pytest.raises(TrainingInterrupted):
            _one_call(_ctrl_c_then(returns=False))
    finally:
        signal.signal(signal.SIGINT, previous)
