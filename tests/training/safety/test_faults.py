"""Faults during a run stop it with a message naming the culprit, or are survived.

A user reward that raises, returns the wrong number of scores or strings, or judges nothing
batch after batch stops `gspo-trl train` with exit 2 and one line naming the reward and the
row (the table runs the real wrapper on real reward functions; two cases run a real
training step through the CLI). A disk that fills while a checkpoint is written leaves no
checkpoint that looks complete, and `--resume` after freeing it continues from the last
complete one (a real tmpfs, real runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.model.checkpoints import latest_checkpoint
from gspo_trl.training.safety.reward_checks import AsyncGuardedReward, RewardFailedError, guard_rewards
from gspo_trl.training.safety.staged_checkpoints import STAGING
from tests._gspo_helpers import tiny_model_dir
from tests.training.safety.test_resume import RUN_TIMEOUT_S
from tests.training.test_distributed import (
    kill_leftover_launches,  # noqa: F401 - autouse fixture: kills launches a failed test left
    start,
    wait_or_kill,
    write_mini_recipe,
)
from tests.training.test_preflight import BASE_RECIPE

COMPLETIONS = ["12", "34", "56", "78"]
PROMPTS = ["reverse 21", "reverse 43", "reverse 65", "reverse 87"]


def raises(completions, **_):
    return {"a": 1}["b"]


def too_few(completions, **_):
    return [1.0] * (len(completions) - 1)


def strings(completions, **_):
    return ["1.0" if c == "56" else 0.0 for c in completions]


def a_string(completions, **_):
    return "1.0"


def infinite(completions, **_):
    return [float("inf")] + [0.0] * (len(completions) - 1)


def never_judges(completions, **_):
    return [None] * len(completions)


async def async_strings(completions, **_):
    return strings(completions)


def fine(completions, **_):
    import numpy as np

    return [1.0, None, np.float32(0.5), True]


FAULTS = [
    # (reward function, words the error must contain)
    (raises, ["'raises'", "KeyError", "test_faults.py:", "reverse 21"]),
    (too_few, ["'too_few'", "3 scores for 4 completions"]),
    (strings, ["'strings'", "'1.0'", "row 2", "'56'"]),
    (a_string, ["'a_string'", "not a list"]),
    (infinite, ["'infinite'", "row 0", "finite"]),
    (async_strings, ["'async_strings'", "row 2"]),
]


def _call(reward, completions=COMPLETIONS):
    result = reward(prompts=PROMPTS, completions=completions, solution=["x"] * len(completions))
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


@pytest.mark.parametrize(("func", "words"), FAULTS, ids=[f[0].__name__ for f in FAULTS])
def test_a_broken_reward_is_named_with_its_row(func, words) -> None:
    (guarded,) = guard_rewards([func])
    assert guarded.__name__ == func.__name__  # TRL's metric key is unchanged
    with pytest.raises(RewardFailedError) as caught:
        _call(guarded)
    for word in words:
        assert word in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_rewards_that_work_pass_through_unchanged() -> None:
    (guarded,) = guard_rewards([fine])
    assert _call(guarded)[:2] == [1.0, None]
    (asynchronous,) = guard_rewards([async_strings])
    assert isinstance(asynchronous, AsyncGuardedReward)


def test_a_reward_that_judges_nothing_stops_after_n_batches() -> None:
    (guarded,) = guard_rewards([never_judges], max_unjudged_batches=3)
    _call(guarded), _call(guarded)
    with pytest.raises(RewardFailedError, match=r"'never_judges' judged no completion .* 3 rollout batches"):
        _call(guarded)
    (mixed,) = guard_rewards([never_judges], max_unjudged_batches=2)
    _call(mixed)
    mixed.func = fine  # one judged batch resets the count
    _call(mixed)
    mixed.func = never_judges
    _call(mixed)


REWARD_MODULE = """
def reward_that_raises(completions, **kwargs):
    raise RuntimeError("my reward is broken")


def reward_of_strings(completions, **kwargs):
    return ["good"] * len(completions)
"""


@pytest.mark.parametrize(
    ("reward", "words"),
    [
        (
            "reward_that_raises",
            ["'reward_that_raises'", "RuntimeError: my reward is broken", "user_rewards.py:3"],
        ),
        ("reward_of_strings", ["'reward_of_strings'", "'good'", "row 0"]),
    ],
)
def test_train_stops_on_a_broken_user_reward_in_one_line(tmp_path, capsys, reward, words) -> None:
    module = tmp_path / "user_rewards.py"
    module.write_text(REWARD_MODULE)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(BASE_RECIPE + f"output_dir: {tmp_path / 'out'}\n")
    assert gspo_trl_main(["train", str(recipe), "--rewards", f"[{module}:{reward}]"]) == 2
    err = capsys.readouterr().err
    lines = re.findall(r"error: .*", err)  # after the progress bar's unterminated line
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]


@contextlib.contextmanager
def small_disk(folder: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of `size_mb` MiB mounted on `folder` (root only), unmounted after."""
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(disk: Path, leave_bytes: int) -> Path:
    """Fill `disk` until `leave_bytes` are free; returns the filler file."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with filler.open("wb") as file:
        file.truncate(0)
        os.posix_fallocate(file.fileno(), 0, max(0, free - leave_bytes))
    return filler


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_disk_full_during_a_checkpoint_leaves_none_and_resume_continues(tmp_path: Path) -> None:
    """Run to checkpoint-2; fill the disk to half a checkpoint; resuming to step 4 dies saving
    checkpoint-4, which must not appear; free the disk; --resume finishes from checkpoint-2."""
    model = tiny_model_dir(tmp_path)
    recipe = write_mini_recipe(tmp_path, model)
    with small_disk(tmp_path / "disk", 64) as disk:
        out = disk / "run"

        def train(max_steps: int, *extra: str) -> tuple[int, str]:
            command = [
                sys.executable,
                "-m",
                "gspo_trl.train",
                "--config",
                str(recipe),
                "--output_dir",
                str(out),
            ]
            command += ["--max_steps", str(max_steps), "--save_steps", "2", "--steps_per_generation", "2"]
            log = tmp_path / f"train-{max_steps}-{len(extra)}.log"
            process = start([*command, *extra], log)
            return wait_or_kill(process, log, RUN_TIMEOUT_S), log.read_text(errors="replace")

        status, log = train(2)
        assert status == 0, log[-3000:]
        checkpoint_bytes = sum(f.stat().st_size for f in (out / "checkpoint-2").rglob("*") if f.is_file())
        filler = _fill(disk, checkpoint_bytes // 2)

        status, log = train(4, "--resume")
        assert status == 2 and "error: output_dir: the disk holding" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        assert not (out / "checkpoint-4").exists(), "a crash mid-save left a checkpoint that looks complete"
        assert latest_checkpoint(out) == out / "checkpoint-2"

        filler.unlink()
        status, log = train(4, "--resume")
        assert status == 0, log[-3000:]
        assert latest_checkpoint(out) == out / "checkpoint-4"
        state = json.loads((out / "trainer_state.json").read_text())
        assert state["global_step"] == 4
        trained = re.findall(r"^step \d/4 \| (?!held-out)", log, re.MULTILINE)  # a console line a step
        assert len(trained) == 2, f"did not continue from checkpoint-2 (steps 3-4 only):\n{log[-3000:]}"
        assert not (out / STAGING).exists() or not any((out / STAGING).iterdir())


@pytest.mark.slow
def test_the_best_checkpoint_recorded_in_each_checkpoint_exists(tmp_path: Path) -> None:
    """metric_for_best_model picks a checkpoint during its (staged) save: the trainer_state.json
    inside every checkpoint, which --resume reads, must name the renamed folder, not the staging
    one (which is gone: load_best_model_at_end would fail after a resume)."""
    from _gspo_helpers import make_trainer
    from datasets import Dataset

    eval_rows = Dataset.from_list([{"prompt": f"add {i} and 1"} for i in range(8)])
    trainer = make_trainer(
        tiny_model_dir(tmp_path),
        tmp_path / "run",
        eval_dataset=eval_rows,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        metric_for_best_model="reward",
        load_best_model_at_end=True,
    )
    trainer.train()
    checkpoints = sorted((tmp_path / "run").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-2", "checkpoint-4"]
    for checkpoint in checkpoints:
        best = json.loads((checkpoint / "trainer_state.json").read_text())["best_model_checkpoint"]
        assert STAGING not in Path(best).parts and Path(best).is_dir(), (checkpoint.name, best)
