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
from gspo_trl.model.loading.checkpoints import latest_checkpoint
from gspo_trl.training.probes.staged_checkpoints import STAGING
from gspo_trl.training.safety.reward_output_checks import (
    AsyncCheckedReward,
    RewardFailedError,
    with_reward_checks,
)
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


def huge(completions, **_):
    return [0.0, -1e9] + [0.0] * (len(completions) - 2)


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
    (huge, ["'huge'", "-1000000000.0", "row 1", "+-1e+06", "rescale"]),
    (never_judges, ["'never_judges'", "judged none of the 4 completions of the first rollout batch"]),
    (async_strings, ["'async_strings'", "row 2"]),
]


def _call(reward, completions=COMPLETIONS):
    result = reward(prompts=PROMPTS, completions=completions, solution=["x"] * len(completions))
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


@pytest.mark.parametrize(("func", "words"), FAULTS, ids=[f[0].__name__ for f in FAULTS])
def test_a_broken_reward_is_named_with_its_row(func, words) -> None:
    (guarded,) = with_reward_checks([func])
    assert guarded.__name__ == func.__name__  # TRL's metric key is unchanged
    with pytest.raises(RewardFailedError) as caught:
        _call(guarded)
    for word in words:
        assert word in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_rewards_that_work_pass_through_unchanged() -> None:
    (guarded,) = with_reward_checks([fine])
    assert _call(guarded)[:2] == [1.0, None]
    (asynchronous,) = with_reward_checks([async_strings])
    assert isinstance(asynchronous, AsyncCheckedReward)


def test_a_reward_that_judges_nothing_stops_after_n_batches() -> None:
    (guarded,) = with_reward_checks([never_judges], max_unjudged_batches=3)
    guarded.func = fine  # a first batch judged: only the batches-in-a-row rule applies after it
    _call(guarded)
    guarded.func = never_judges
    _call(guarded), _call(guarded)
    with pytest.raises(RewardFailedError, match=r"'never_judges' judged no completion .* 3 rollout batches"):
        _call(guarded)
    (mixed,) = with_reward_checks([fine], max_unjudged_batches=2)
    _call(mixed)
    mixed.func = never_judges
    _call(mixed)
    mixed.func = fine  # one judged batch resets the count
    _call(mixed)
    mixed.func = never_judges
    _call(mixed)


def test_the_first_batch_needs_one_judged_completion_from_any_reward() -> None:
    """A maths-and-code mixture: each reward answers None for the other task's rows, so one
    reward judging nothing in the first batch is fine while another judged; none judging is not."""
    judged, unjudged = with_reward_checks([fine, never_judges])
    _call(unjudged), _call(judged)  # either order: the batch is complete once both reported
    first, second = with_reward_checks(
        [never_judges, lambda completions, **_: [float("nan")] * len(completions)]
    )
    _call(first)
    with pytest.raises(RewardFailedError, match=r"\['never_judges', '<lambda>'\] judged none of the 4"):
        _call(second)


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
def test_a_disk_full_during_a_checkpoint_leaves_none_and_resume_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run to checkpoint-2; fill the disk to half a checkpoint; resuming to step 4 dies saving
    checkpoint-4, which must not appear; free the disk; --resume finishes from checkpoint-2."""
    model = tiny_model_dir(tmp_path)
    recipe = write_mini_recipe(tmp_path, model)
    with small_disk(tmp_path / "disk", 64) as disk:
        out = disk / "run"

        def steps(max_steps: int) -> list[str]:
            return ["--max_steps", str(max_steps), "--save_steps", "2", "--steps_per_generation", "2"]

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
            command += steps(max_steps)
            log = tmp_path / f"train-{max_steps}-{len(extra)}.log"
            process = start([*command, *extra], log)
            return wait_or_kill(process, log, RUN_TIMEOUT_S), log.read_text(errors="replace")

        # checkpoint-2 to start from, and the run that finishes once the disk is freed, in this
        # process (a subprocess only adds ~15 s of imports); the run that dies mid-save is a real
        # `python -m gspo_trl.train` process
        assert gspo_trl_main(["train", str(recipe), "--output_dir", str(out), *steps(2)]) == 0
        checkpoint_bytes = sum(f.stat().st_size for f in (out / "checkpoint-2").rglob("*") if f.is_file())
        filler = _fill(disk, checkpoint_bytes // 2)

        status, log = train(4, "--resume")
        assert status == 2 and "error: output_dir: the disk holding" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        assert not (out / "checkpoint-4").exists(), "a crash mid-save left a checkpoint that looks complete"
        assert latest_checkpoint(out) == out / "checkpoint-2"

        filler.unlink()
        capsys.readouterr()
        status = gspo_trl_main(["train", str(recipe), "--output_dir", str(out), *steps(4), "--resume"])
        printed = capsys.readouterr()
        log = printed.out + printed.err
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
    from datasets import Dataset

    from tests._gspo_helpers import make_trainer

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


# --- issue 21, items 11-15: runs that overwrote or resumed the wrong thing -------------------

FINISHED = ["--max_steps", "4", "--save_steps", "2", "--steps_per_generation", "2"]
"""The finished run every scenario starts from: checkpoint-2, checkpoint-4, the final model."""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(recipe, run dir) of one real 4-step run, copied by each scenario."""
    root = tmp_path_factory.mktemp("finished")
    recipe = write_mini_recipe(root, tiny_model_dir(root))
    out = root / "run"
    assert gspo_trl_main(["train", str(recipe), "--output_dir", str(out), *FINISHED]) == 0
    return recipe, out


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file but the run lock (every launch takes and releases it): equal
    snapshots mean nothing was written or removed."""
    from gspo_trl.training.safety.run_dir import LOCK_FILE

    files = (p for p in folder.rglob("*") if p.name != LOCK_FILE)
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in files}


def global_step(run: Path) -> int:
    return json.loads((run / "trainer_state.json").read_text())["global_step"]


def metrics_steps(run: Path) -> list[int]:
    """The steps of the training log events (those with a loss) in metrics.jsonl, in order."""
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [event["step"] for event in events if "loss" in event]


@contextlib.contextmanager
def lock_held_by(run: Path, alive: bool) -> Iterator[int]:
    """A lock in `run` written the way RunLock writes it, for a live process (a `sleep`) or
    for one that has exited (what kill -9 leaves)."""
    import socket

    from gspo_trl.training.safety.run_lock import LOCK_FILE, _process_start

    holder = subprocess.Popen(["sleep", "300" if alive else "0"])
    if not alive:
        holder.wait()
    started = _process_start(holder.pid) if alive else "1"
    (run / LOCK_FILE).write_text(
        json.dumps(
            {"pid": holder.pid, "host": socket.gethostname(), "process_start": started, "since": "then"}
        )
    )
    try:
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def _no_model(run: Path) -> None:
    (run / "checkpoint-4" / "model.safetensors").unlink()


def _no_checkpoints(run: Path) -> None:
    for checkpoint in run.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)


def _corrupt_metrics(run: Path) -> None:
    with (run / "metrics.jsonl").open("ab") as file:
        file.write(b'\xff\xfe{"step": 9}\n{"step": 10, "loss": \n')


FAULT_SCENARIOS = [
    # (id and issue item, damage to the finished run, command, exit status, words in the log or error)
    (
        "11: newest checkpoint without its model",
        _no_model,
        ["train", "--resume", *FINISHED],
        0,
        ["skipping", "checkpoint-4: incomplete (no model weights", "falling back to", "checkpoint-2"],
    ),
    (
        "12: a live run holds the lock",
        "live lock",
        ["train", "--resume", *FINISHED],
        2,
        ["in use by another run"],
    ),
    (
        "12+14: a dead run's lock is taken over, a harmless change warned",
        "dead lock",
        ["train", "--resume", *FINISHED, "--logging_steps", "2"],
        0,
        ["taking over the lock", "no longer runs", "fine to change", "logging_steps (1.0 -> 2.0)"],
    ),
    (
        "13: training again without --resume or --overwrite",
        None,
        ["train", *FINISHED],
        2,
        [
            "holds a previous run",
            "checkpoint-2, checkpoint-4, trainer_state.json, metrics.jsonl",
            "--overwrite",
        ],
    ),
    (
        "13: --overwrite starts again from nothing",
        None,
        ["train", "--overwrite", "--max_steps", "2", "--save_steps", "2", "--steps_per_generation", "2"],
        0,
        ["--overwrite: removed the previous run's checkpoint-2, checkpoint-4"],
    ),
    (
        "13: --resume over a finished run with no checkpoint left",
        _no_checkpoints,
        ["train", "--resume", *FINISHED],
        2,
        ["finished run and no complete checkpoint", "--overwrite"],
    ),
    (
        "14: a different num_generations",
        None,
        ["train", "--resume", *FINISHED, "--num_generations", "2"],
        2,
        ["is a different run", "num_generations (4 -> 2)"],
    ),
    (
        "14: a different model",
        None,
        ["train", "--resume", *FINISHED, "--model.name_or_path", "tiny"],
        2,
        ["is a different run", "model.name_or_path (", '-> "tiny")'],
    ),
    (
        "14: different data",
        None,
        ["train", "--resume", *FINISHED, "--data.num_rows", "48"],
        2,
        ["is a different run", "data (fingerprint of the training rows)", "data.num_rows (64 -> 48)"],
    ),
    ("15: report on a corrupt metrics.jsonl", _corrupt_metrics, ["report"], 0, ["skipped 2 corrupt line(s)"]),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "damage", "command", "status", "words"), FAULT_SCENARIOS, ids=[s[0] for s in FAULT_SCENARIOS]
)
def test_issue_21_runs_neither_overwrite_nor_resume_the_wrong_thing(
    finished_run, tmp_path, capsys, caplog, case, damage, command, status, words
) -> None:
    """Each scenario on a copy of one finished run: the outcome, and for every refusal, the run
    directory exactly as it was (nothing overwritten, nothing resumed)."""
    recipe, finished = finished_run
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    if callable(damage):
        damage(run)
    before = snapshot(run)
    argv = (
        [command[0], str(run)]
        if command[0] == "report"
        else [command[0], str(recipe), "--output_dir", str(run)]
    )
    with contextlib.ExitStack() as stack:
        if damage in ("live lock", "dead lock"):
            pid = stack.enter_context(lock_held_by(run, alive=damage == "live lock"))
            before = snapshot(run)
        with caplog.at_level("WARNING"):
            assert gspo_trl_main([*argv, *command[1:]]) == status, capsys.readouterr().err[-3000:]
    err = capsys.readouterr().err
    text = "\n".join(re.findall(r"error: .*", err)) if status else caplog.text
    assert "Traceback" not in err, err
    for word in words:
        assert word in text, text
    if status:
        assert len(re.findall(r"error: .*", err)) == 1, err
        assert snapshot(run) == before, "a refused run changed its output_dir"
        if damage == "live lock":
            import socket

            assert f"pid {pid} on {socket.gethostname()}" in text, text
        return
    if case.startswith("11"):
        assert global_step(run) == 4 and (run / "checkpoint-4" / "model.safetensors").is_file()
        assert metrics_steps(run) == [1, 2, 3, 4, 3, 4], "not resumed from checkpoint-2"
    if case.startswith("12+14"):
        assert (run / ".gspo-trl.lock").read_text() == "", "the lock still names its finished run"
    if case.startswith("13"):
        assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2"], "old checkpoints left"
        assert global_step(run) == 2 and max(metrics_steps(run)) == 2, "the old run's log is mixed in"
    if case.startswith("15"):
        assert len(list((run / "report").glob("*.png"))) >= 4
