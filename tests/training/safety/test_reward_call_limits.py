"""No reward outlives its limit (issue 39, item 2): one that swallows every alarm with a bare
`except:` is stopped without its cooperation in one line, a second Ctrl-C ends a run whose
reward swallows the first (its checkpoint kept), the handlers are put back even when the
limit falls as the call returns, and a limit the timer cannot take is refused by name.

On main the bare-except reward ran on past every limit (the one-shot alarm swallowed) and
both Ctrl-C were swallowed too; the Ctrl-C run is a real `gspo-trl train` on the tiny model.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gspo_trl.core.errors import RewardFailedError
from gspo_trl.training.safety import reward_calls
from tests._gspo_helpers import tiny_model_dir
from tests._paths import ROOT
from tests.training.safety.test_reward_calls import _one_call
from tests.training.test_distributed import start, subprocess_env, tail, wait_or_kill, write_mini_recipe

# "retry until the grader answers": catches everything, the limit's alarm and Ctrl-C included
STUBBORN = """\
import os, pathlib, time


def grader(completions, **_):
    calls = pathlib.Path(os.environ["CALLS"])
    calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
    if len(calls.read_text()) < int(os.environ.get("ANSWER_CALLS", "0")) + 1:
        return [min(len(c), 40) / 40.0 for c in completions]
    while True:
        try:
            time.sleep(0.05)
        except:  # noqa: E722
            pass
"""


def test_a_reward_with_a_bare_except_stops_at_its_limit_in_one_line(tmp_path) -> None:
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    program = textwrap.dedent(
        """
        from stubborn import grader
        from gspo_trl.training.safety.reward_output_checks import with_reward_checks
        import time
        (checked,) = with_reward_checks([grader], time_limits_s=[1.0])
        print(time.monotonic(), flush=True)  # the call starts (imports took what they took)
        checked(prompts=["p"] * 4, completions=["c"] * 4)
        print("returned")
        """
    )
    env = subprocess_env(PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}", CALLS=str(tmp_path / "calls"))
    argv = [sys.executable, "-c", program]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - float(done.stdout.split()[0])  # CLOCK_MONOTONIC: one clock per machine
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and "returned" not in done.stdout, done.stderr[-2000:]
    assert len(errors) == 1 and "reward 'grader' ignored its time limit of 1 s" in errors[0], done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert 1.0 + reward_calls.HARD_STOP_S - 0.5 < wall < 1.0 + reward_calls.HARD_STOP_S + 3, wall


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_second_ctrl_c_ends_a_run_whose_reward_swallows_the_first(tmp_path) -> None:
    """The reward answers the first rollout batch (checkpoint-2 is saved), then swallows
    everything; the first SIGINT asks for a checkpoint at the step's end, the second ends the
    run at once: exit 130, one line, checkpoint-2 intact."""
    recipe = write_mini_recipe(tmp_path, tiny_model_dir(tmp_path))
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    text = recipe.read_text()
    line = text[text.index("rewards:") : text.index("\n", text.index("rewards:"))]
    recipe.write_text(text.replace(line, f'rewards: ["{tmp_path / "stubborn.py"}:grader"]'))
    out, log, calls = tmp_path / "run", tmp_path / "train.log", tmp_path / "calls"
    command = [sys.executable, "-m", "gspo_trl.cli.main", "train", str(recipe), "--output_dir", str(out)]
    command += ["--max_steps", "4", "--steps_per_generation", "2"]  # the reward runs at steps 1 and 3
    command += ["--save_strategy", "steps", "--save_steps", "2"]
    process = start(command, log, subprocess_env(CALLS=str(calls), ANSWER_CALLS="1"))
    deadline = time.monotonic() + 300
    while not (calls.exists() and len(calls.read_text()) >= 2):  # the second call: it swallows
        assert process.poll() is None, tail(log)
        assert time.monotonic() < deadline, f"the reward was never called twice:\n{tail(log)}"
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.05)
    os.killpg(process.pid, signal.SIGINT)
    time.sleep(1.0)
    assert process.poll() is None, tail(log)  # the first one waits for the reward (the grace)
    os.killpg(process.pid, signal.SIGINT)
    sent = time.monotonic()
    status = wait_or_kill(process, log, 60)
    assert status == 130, f"exit {status} after two Ctrl-C:\n{tail(log)}"
    assert time.monotonic() - sent < reward_calls.INTERRUPT_GRACE_S, tail(log)
    errors = [line for line in log.read_text().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Ctrl-C again during reward 'grader'" in errors[0], tail(log)
    checkpoint = out / "checkpoint-2"
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "trainer_state.json").is_file()


def test_handlers_are_put_back_when_the_limit_falls_as_the_call_returns() -> None:
    """Calls ending within a millisecond of their limit, either side: after each, the alarm,
    SIGINT and SIGTERM handlers are the ones from before and our re-arming timer is gone."""
    before = {s: signal.getsignal(s) for s in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM)}
    limit, timeouts = 0.004, 0

    def near_the_limit(completions, **_):
        end = time.monotonic() + limit + (len(completions) - 8) * 0.0002
        while time.monotonic() < end:
            pass
        return [1.0] * len(completions)

    for index in range(200):
        try:
            _near_call(near_the_limit, limit, 4 + index % 9)
        except RewardFailedError:
            timeouts += 1
        now = {s: signal.getsignal(s) for s in before}
        left, interval = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's own, or none
        assert now == before and interval == 0.0 and left != limit, (index, now, left)
    assert 0 < timeouts < 200  # the limit fell on both sides of the return


def _near_call(func, limit: float, completions: int):
    from gspo_trl.training.safety.reward_output_checks import with_reward_checks

    (checked,) = with_reward_checks([func], time_limits_s=[limit])
    return checked(prompts=["p"] * completions, completions=["c"] * completions)


@pytest.mark.parametrize("limit", [1e20, float("inf"), float("nan"), reward_calls.MAX_TIME_LIMIT_S * 2])
def test_a_limit_beyond_the_timer_is_refused_naming_the_setting(limit) -> None:
    with pytest.raises(RewardFailedError) as raised:
        _one_call(lambda completions, **_: [1.0] * len(completions), limit)
    message = str(raised.value)
    assert "\n" not in message and "time_limit_s" in message and "Overflow" not in message, message


def test_docs_say_a_reward_must_not_catch_base_exception() -> None:
    text = " ".join((Path(ROOT) / "docs" / "rewards.md").read_text().split())
    assert "**A reward must not catch `BaseException`**" in text
    assert f"every {reward_calls.REARM_S:g} s" in text
    assert f"{reward_calls.HARD_STOP_S:g} s after its limit" in text
