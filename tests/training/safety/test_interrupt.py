"""Ctrl-C or SIGTERM during training: a checkpoint at the end of the step, and --resume goes on.

A real `gspo-trl train` process gets SIGINT (sent to its process group, as a terminal does) or
SIGTERM (as `scancel` or a scheduler's time limit does) once it has logged its first step; it
must save a complete checkpoint, print one line and exit 130. Under `accelerate launch` with 2
ranks the launcher gets the signal and passes it on: both ranks must stop at the same step,
save one checkpoint, and `--resume` must continue from it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gspo_trl.model.loading.checkpoints import latest_checkpoint
from tests._gspo_helpers import tiny_model_dir
from tests.training.safety.test_resume import RUN_TIMEOUT_S
from tests.training.test_distributed import (
    ACCELERATE,
    assert_a_loadable_trained_checkpoint,
    deepspeed_ready,  # noqa: F401 - session fixture: DeepSpeed's CPU comm op built once, before launches
    free_port,
    kill_group,
    kill_leftover_launches,  # noqa: F401 - autouse fixture: kills launches a failed test left
    start,
    tail,
    wait_or_kill,
    write_mini_recipe,
)


def wait_for_text(process: subprocess.Popen, log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None:
            pytest.fail(f"run ended ({process.returncode}) before {text!r}:\n{tail(log)}")
        if time.monotonic() > deadline:
            kill_group(process)
            pytest.fail(f"no {text!r} after {timeout} s:\n{tail(log)}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)


@pytest.mark.slow
@pytest.mark.timeout(2 * RUN_TIMEOUT_S)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_saves_a_checkpoint_and_exits_130(sig: signal.Signals, tmp_path: Path) -> None:
    recipe = write_mini_recipe(tmp_path, tiny_model_dir(tmp_path))
    out, log = tmp_path / "run", tmp_path / "train.log"
    command = [sys.executable, "-m", "gspo_trl.cli.main", "train", str(recipe), "--output_dir", str(out)]
    command += ["--max_steps", "200", "--save_strategy", "no"]
    process = start(command, log)
    wait_for_text(process, log, "step   1/200 |", RUN_TIMEOUT_S)  # step 1's console line
    kill_group(process, sig)
    status = wait_or_kill(process, log, RUN_TIMEOUT_S)
    text = log.read_text(errors="replace")
    assert status == 130, f"exit {status}:\n{tail(log)}"
    assert "Traceback" not in text, text[-4000:]
    assert "gspo-trl train: interrupted" in text
    checkpoint = latest_checkpoint(out)
    assert checkpoint is not None, f"no complete checkpoint after {sig.name}:\n{tail(log)}"
    step = int(checkpoint.name.split("-")[1])
    assert 1 <= step < 200 and f"Interrupted at step {step}" in text
    assert not (out / "model.safetensors").exists(), "an interrupted run must not look finished"


@pytest.mark.slow
@pytest.mark.timeout(4 * RUN_TIMEOUT_S)
@pytest.mark.usefixtures("deepspeed_ready")
def test_two_ranks_stop_at_one_step_save_and_resume(tmp_path: Path) -> None:
    """The launcher alone is signalled (its ranks run in sessions of their own): SIGINT, then
    SIGTERM to the run resumed from that checkpoint; each time both ranks stop at one step and
    save it, and `--resume` continues from the newest. Before SIGTERM was handled, that signal
    killed both ranks with nothing saved since the last checkpoint. (Both signals in one chain:
    3 ZeRO-2 launches instead of 2 for each signal.) The last launch, resumed to its end, saves
    on schedule: that checkpoint is ZeRO-2's, written by both ranks, loadable and trained, as
    test_distributed.py checks DDP's and ZeRO-3's (one ZeRO-2 launch fewer in the suite).

    ZeRO-2 (DeepSpeed saves and loads the optimizer itself): on CPU a plain DDP launch with
    --multi_gpu gives each rank the device `cpu:N`, which transformers passes to torch.load as
    map_location for the optimizer and torch refuses; on GPUs that is `cuda:N` and works."""
    import json
    import re

    model = tiny_model_dir(tmp_path)
    recipe = write_mini_recipe(tmp_path, model)
    out = tmp_path / "run"

    def launch(log: Path, *overrides: str) -> subprocess.Popen:
        command = [*ACCELERATE, "--config_file", "configs/zero2.yaml", "--num_processes", "2"]
        command += ["--mixed_precision", "no", "--main_process_port", str(free_port())]
        command += ["-m", "gspo_trl.train", "--config", str(recipe), "--output_dir", str(out)]
        return start([*command, "--save_strategy", "no", *overrides], log)

    def stop_both_ranks(sig: signal.Signals, log: Path, after_step: int, *overrides: str) -> int:
        """Launch, signal the launcher's group once step `after_step` + 1 is logged; the step saved."""
        process = launch(log, "--max_steps", "200", *overrides)
        wait_for_text(process, log, f"step {after_step + 1:>3}/200 |", RUN_TIMEOUT_S)
        os.killpg(process.pid, sig)  # the launcher's group only, as a terminal or scancel does
        wait_or_kill(process, log, RUN_TIMEOUT_S)  # the launcher's own status is torch's (1)
        stopped = re.findall(r"Interrupted at step (\d+)", log.read_text(errors="replace"))
        assert len(stopped) == 2 and len(set(stopped)) == 1, (
            f"{sig.name}: ranks did not stop together:\n{tail(log)}"
        )
        step = int(stopped[0])
        assert step > after_step and latest_checkpoint(out) == out / f"checkpoint-{step}", tail(log)
        return step

    first = stop_both_ranks(signal.SIGINT, tmp_path / "train.log", 0)
    resumed_log = tmp_path / "resume-sigterm.log"
    second = stop_both_ranks(signal.SIGTERM, resumed_log, first, "--resume")
    assert f"resuming from {out / f'checkpoint-{first}'}" in resumed_log.read_text(errors="replace")

    final_log, last = tmp_path / "resume.log", second + 2
    final = launch(
        final_log, "--max_steps", str(last), "--resume", "--save_strategy", "steps", "--save_steps", str(last)
    )
    assert wait_or_kill(final, final_log, RUN_TIMEOUT_S) == 0, tail(final_log)
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == last
    assert f"resuming from {out / f'checkpoint-{second}'}" in final_log.read_text(errors="replace")
    # the scheduled save of a 2-rank ZeRO-2 run (test_distributed.py's ZeRO-2 arm, now here)
    assert_a_loadable_trained_checkpoint(out, last, model, final_log, deepspeed=True)
