"""Ctrl-C during `gspo-trl train`: a checkpoint at the end of the step, exit 130, no traceback.

A real `gspo-trl train` process gets SIGINT (sent to its process group, as a terminal does)
once it has logged its first step; it must save a complete checkpoint, print one line and
exit 130, and `--resume` must find that checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _gspo_helpers import tiny_model_dir
from test_distributed import (
    kill_group,
    kill_leftover_launches,  # noqa: F401 - autouse fixture: kills launches a failed test left
    start,
    tail,
    wait_or_kill,
    write_mini_recipe,
)
from test_resume import RUN_TIMEOUT_S

from gspo_trl.model.checkpoints import latest_checkpoint


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
def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path: Path) -> None:
    recipe = write_mini_recipe(tmp_path, tiny_model_dir(tmp_path))
    out, log = tmp_path / "run", tmp_path / "train.log"
    command = [sys.executable, "-m", "gspo_trl.cli.main", "train", str(recipe), "--output_dir", str(out)]
    command += ["--max_steps", "200", "--save_strategy", "no"]
    process = start(command, log)
    wait_for_text(process, log, "step   1/200 |", RUN_TIMEOUT_S)  # step 1's console line
    kill_group(process, signal.SIGINT)
    status = wait_or_kill(process, log, RUN_TIMEOUT_S)
    text = log.read_text(errors="replace")
    assert status == 130, f"exit {status}:\n{tail(log)}"
    assert "Traceback" not in text, text[-4000:]
    assert "gspo-trl train: interrupted" in text
    checkpoint = latest_checkpoint(out)
    assert checkpoint is not None, f"no complete checkpoint after Ctrl-C:\n{tail(log)}"
    step = int(checkpoint.name.split("-")[1])
    assert 1 <= step < 200 and f"Interrupted at step {step}" in text
    assert not (out / "model.safetensors").exists(), "an interrupted run must not look finished"
