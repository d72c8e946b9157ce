"""Crash and resume: a run SIGKILLed mid-training and resumed with --resume ends where an
uninterrupted run ends - same step, same data order, same samples, same optimizer state,
same weights.

Real processes and a real SIGKILL: the run is killed as soon as its first checkpoint is
complete (polled, bounded), i.e. mid-training, and `gspo-trl train --resume` continues it (the
uninterrupted reference runs the same arguments in the test's own process).
Comparing the prompts and completions the reward saw after the resume point proves the
data position and the RNG were restored (a different sampler position changes the prompts,
a different RNG the sampled completions); the optimizer's Adam moments prove it was
restored rather than restarted. Checkpoints fall on rollout-batch boundaries (save_steps a
multiple of steps_per_generation): the rollout buffer of a half-used batch is not saved.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from gspo_trl.model.loading.checkpoints import latest_checkpoint
from tests._gspo_helpers import tiny_model_dir
from tests.training.test_distributed import (
    kill_group,
    kill_leftover_launches,  # noqa: F401 - autouse fixture: kills launches a failed test left
    load_weights,
    start,
    subprocess_env,
    tail,
    wait_or_kill,
    write_mini_recipe,
)

MAX_STEPS = 8
SAVE_STEPS = 4  # a multiple of steps_per_generation (4, the GSPO default)
RUN_TIMEOUT_S = 300


def train_command(recipe: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-m", "gspo_trl.train", "--config", str(recipe)),
        *("--output_dir", str(output_dir), "--max_steps", str(MAX_STEPS)),
        *("--save_steps", str(SAVE_STEPS), *extra),
    ]


def run_to_end(command: list[str], log: Path, reward_log: Path) -> None:
    process = start(command, log, subprocess_env(GSPO_REWARD_LOG=str(reward_log)))
    status = wait_or_kill(process, log, RUN_TIMEOUT_S)
    assert status == 0, f"run failed ({status}); log tail:\n{tail(log)}"


def run_here_to_end(command: list[str], reward_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The uninterrupted reference run: the same `gspo_trl.train` arguments, in this process (a
    subprocess only added ~10 s of imports); the crashed and resumed runs stay real processes."""
    from gspo_trl.cli.main import run_command
    from gspo_trl.train import main

    monkeypatch.setenv("GSPO_REWARD_LOG", str(reward_log))
    args = command[command.index("gspo_trl.train") + 1 :]
    assert run_command("train", main, args) == 0


def kill_after_first_checkpoint(command: list[str], log: Path, reward_log: Path) -> None:
    """Start the run, SIGKILL it (launcher and children) once checkpoint-4 is complete."""
    output_dir = Path(command[command.index("--output_dir") + 1])
    marker = output_dir / f"checkpoint-{SAVE_STEPS}" / "trainer_state.json"
    process = start(command, log, subprocess_env(GSPO_REWARD_LOG=str(reward_log)))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while not marker.exists():
            if process.poll() is not None:
                pytest.fail(f"run ended ({process.returncode}) before checkpoint-{SAVE_STEPS}:\n{tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"no checkpoint-{SAVE_STEPS} after {RUN_TIMEOUT_S} s:\n{tail(log)}")
            with contextlib.suppress(subprocess.TimeoutExpired):  # still running: poll again
                process.wait(timeout=0.05)
    finally:
        kill_group(process, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert not (output_dir / f"checkpoint-{MAX_STEPS}").exists(), "the run finished before the kill"


def losses_by_step(output_dir: Path) -> dict[int, float]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return {entry["step"]: entry["loss"] for entry in state["log_history"] if "loss" in entry}


def reward_calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(3 * RUN_TIMEOUT_S + 60)
def test_sigkilled_run_resumes_to_the_uninterrupted_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_model_dir(tmp_path)
    recipe = write_mini_recipe(tmp_path, model)
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"

    run_here_to_end(train_command(recipe, reference), tmp_path / "reference.jsonl", monkeypatch)
    kill_after_first_checkpoint(
        train_command(recipe, crashed), tmp_path / "crash.log", tmp_path / "crash.jsonl"
    )
    resumed_from = latest_checkpoint(crashed)
    assert resumed_from is not None
    resume_step = int(Path(resumed_from).name.split("-")[1])
    run_to_end(
        train_command(recipe, crashed, "--resume"), tmp_path / "resume.log", tmp_path / "resumed.jsonl"
    )

    state = json.loads((crashed / "trainer_state.json").read_text())
    assert state["global_step"] == MAX_STEPS

    expected_calls = reward_calls(tmp_path / "reference.jsonl")
    resumed_calls = reward_calls(tmp_path / "resumed.jsonl")
    generations_left = (MAX_STEPS - resume_step) // SAVE_STEPS
    assert len(resumed_calls) == generations_left, "resume did not continue from the checkpoint"
    for index, (got, want) in enumerate(zip(resumed_calls, expected_calls[-generations_left:], strict=True)):
        assert got["prompts"] == want["prompts"], f"rollout {index}: data order differs after resume"
        assert got["completions"] == want["completions"], f"rollout {index}: sampling (RNG) differs"

    expected_losses, resumed_losses = losses_by_step(reference), losses_by_step(crashed)
    for step in range(resume_step + 1, MAX_STEPS + 1):
        assert resumed_losses[step] == pytest.approx(expected_losses[step], rel=1e-4, abs=1e-7), step

    want_opt = torch.load(reference / f"checkpoint-{MAX_STEPS}" / "optimizer.pt", weights_only=True)
    got_opt = torch.load(crashed / f"checkpoint-{MAX_STEPS}" / "optimizer.pt", weights_only=True)
    assert want_opt["state"].keys() == got_opt["state"].keys()
    for key, want in want_opt["state"].items():
        for name in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(got_opt["state"][key][name], want[name], rtol=1e-4, atol=1e-7)
    want_sched = torch.load(reference / f"checkpoint-{MAX_STEPS}" / "scheduler.pt", weights_only=True)
    got_sched = torch.load(crashed / f"checkpoint-{MAX_STEPS}" / "scheduler.pt", weights_only=True)
    assert got_sched["last_epoch"] == want_sched["last_epoch"] == MAX_STEPS

    final_ref, final_resumed = load_weights(reference), load_weights(crashed)
    for name, tensor in final_ref.items():
        torch.testing.assert_close(final_resumed[name], tensor, rtol=1e-4, atol=1e-6, msg=name)


def _write_checkpoint(folder: Path, step: int) -> None:
    """A checkpoint in the formats the Trainer writes: safetensors, torch archives, JSON."""
    from safetensors.torch import save_file

    folder.mkdir()
    save_file({"w": torch.ones(64, 64), "b": torch.zeros(64)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    torch.save({"state": {0: {"exp_avg": torch.ones(64, 64)}}}, folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    torch.save(
        {"python": (3, (1, 2), None), "cpu": torch.ones(8, dtype=torch.uint8)}, folder / "rng_state.pth"
    )
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))


def _cut(path: Path, keep: float) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


FULL_DISK_DAMAGE = [
    # (what a crash or a full disk left in the newest checkpoint, the file the warning names)
    ("no trainer_state.json", lambda c: (c / "trainer_state.json").unlink(), "no trainer_state.json"),
    ("half a trainer_state.json", lambda c: _cut(c / "trainer_state.json", 0.5), "trainer_state.json"),
    ("half the model", lambda c: _cut(c / "model.safetensors", 0.5), "model.safetensors"),
    ("model header only", lambda c: _cut(c / "model.safetensors", 0.01), "model.safetensors"),
    ("empty optimizer", lambda c: (c / "optimizer.pt").write_bytes(b""), "optimizer.pt: empty"),
    ("half the optimizer", lambda c: _cut(c / "optimizer.pt", 0.5), "optimizer.pt"),
    ("cut rng state", lambda c: _cut(c / "rng_state.pth", 0.9), "rng_state.pth"),
    ("empty scheduler", lambda c: (c / "scheduler.pt").write_bytes(b""), "scheduler.pt"),
    ("all of it", lambda c: [_cut(c / n, 0.5) for n in ("model.safetensors", "trainer_state.json")], "model"),
]


@pytest.mark.parametrize(("case", "damage", "named"), FULL_DISK_DAMAGE, ids=[c[0] for c in FULL_DISK_DAMAGE])
def test_resume_skips_a_checkpoint_a_crash_left_incomplete(
    tmp_path: Path, caplog, case, damage, named
) -> None:
    """The newest checkpoint is unusable: resume from the newest complete one, saying why."""
    for step in (4, 8, 12):
        _write_checkpoint(tmp_path / f"checkpoint-{step}", step)
    (tmp_path / "checkpoint-old").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-12"
    damage(tmp_path / "checkpoint-12")
    with caplog.at_level("WARNING"):
        assert latest_checkpoint(tmp_path, purpose="--resume") == tmp_path / "checkpoint-8"
    assert f"skipping {tmp_path / 'checkpoint-12'}" in caplog.text and named in caplog.text, caplog.text
    assert latest_checkpoint(tmp_path / "missing") is None


MISSING_PARTS = [
    # (issue 21 item 11: a part of the newest checkpoint that is gone, the words the warning names)
    ("model.safetensors", "no model weights"),
    ("optimizer.pt", "no optimizer state"),
    ("scheduler.pt", "no scheduler state"),
    ("rng_state.pth", "no RNG state"),
    ("trainer_state.json", "no trainer_state.json"),
]


@pytest.mark.parametrize(("missing", "named"), MISSING_PARTS, ids=[m[0] for m in MISSING_PARTS])
def test_resume_needs_every_part_it_reads(tmp_path: Path, caplog, missing, named) -> None:
    """transformers resumes from a folder without optimizer.pt or scheduler.pt by silently
    restarting Adam and the schedule, and dies in a traceback without the weights: such a
    folder is skipped for the newest complete one, saying what it lacks and where it falls back."""
    from gspo_trl.model.loading.checkpoints import resumable_checkpoint

    for step in (4, 8):
        _write_checkpoint(tmp_path / f"checkpoint-{step}", step)
    assert resumable_checkpoint(tmp_path) == tmp_path / "checkpoint-8"
    (tmp_path / "checkpoint-8" / missing).unlink()
    with caplog.at_level("WARNING"):
        assert resumable_checkpoint(tmp_path) == tmp_path / "checkpoint-4"
    assert f"skipping {tmp_path / 'checkpoint-8'}: incomplete ({named}" in caplog.text, caplog.text
    assert f"falling back to {tmp_path / 'checkpoint-4'}" in caplog.text, caplog.text
    (tmp_path / "checkpoint-4" / missing).unlink()
    assert resumable_checkpoint(tmp_path) is None


def test_resume_accepts_the_sharded_layouts(tmp_path: Path) -> None:
    """A DeepSpeed checkpoint keeps weights, optimizer and its scheduler in a tag folder named by
    `latest`; a LoRA one holds an adapter instead of the model."""
    from gspo_trl.model.loading.checkpoints import resumable_checkpoint

    deepspeed = tmp_path / "ds" / "checkpoint-2"
    deepspeed.parent.mkdir()
    _write_checkpoint(deepspeed, 2)
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt"):
        (deepspeed / name).unlink()
    (deepspeed / "rng_state.pth").rename(deepspeed / "rng_state_0.pth")
    assert resumable_checkpoint(deepspeed.parent) is None
    (deepspeed / "global_step2").mkdir()
    torch.save({}, deepspeed / "global_step2" / "mp_rank_00_model_states.pt")
    torch.save({}, deepspeed / "global_step2" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (deepspeed / "latest").write_text("global_step2")
    assert resumable_checkpoint(deepspeed.parent) == deepspeed
    lora = tmp_path / "lora" / "checkpoint-2"
    lora.parent.mkdir()
    _write_checkpoint(lora, 2)
    (lora / "model.safetensors").rename(lora / "adapter_model.safetensors")
    assert resumable_checkpoint(lora.parent) == lora


def test_file_names_match_the_libraries_that_write_them() -> None:
    """The resolver and the run-directory guard name these files without importing transformers."""
    from transformers import trainer, utils

    from gspo_trl.model.loading import checkpoints
    from gspo_trl.training.probes import staged_checkpoints
    from gspo_trl.training.reporting import metrics_file
    from gspo_trl.training.safety import run_dir

    assert {
        utils.SAFE_WEIGHTS_NAME,
        utils.SAFE_WEIGHTS_INDEX_NAME,
        utils.WEIGHTS_NAME,
        utils.WEIGHTS_INDEX_NAME,
    } | {
        utils.ADAPTER_SAFE_WEIGHTS_NAME,
        utils.ADAPTER_WEIGHTS_NAME,
    } == set(checkpoints.WEIGHT_FILES)
    assert (trainer.OPTIMIZER_NAME, trainer.OPTIMIZER_NAME_BIN) == checkpoints.OPTIMIZER_FILES
    assert trainer.SCHEDULER_NAME == checkpoints.SCHEDULER_FILE
    assert trainer.FSDP_MODEL_NAME == checkpoints.FSDP_MODEL_PREFIX
    assert trainer.TRAINER_STATE_NAME == checkpoints.TRAINER_STATE
    assert run_dir.METRICS_FILE == metrics_file.METRICS_FILE
    assert run_dir.STAGING == staged_checkpoints.STAGING
