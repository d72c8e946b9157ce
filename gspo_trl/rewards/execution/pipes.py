"""Talking to a sandboxed process from outside: its pipes, its stdin, its verdict."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import time
from typing import Any

from gspo_trl.rewards.execution import _pump
from gspo_trl.rewards.execution.jail import Limits


def feed(fd: int, data: bytes) -> None:
    """Write a job config bigger than a pipe buffer (from a thread: the child reads as we write)."""
    with contextlib.suppress(OSError), os.fdopen(fd, "wb") as f:
        f.write(data)


def collect(
    proc: subprocess.Popen, stdin: bytes, stdin_fd: int, read_fds: list[int], limits: Limits, start: float
) -> tuple[dict[int, bytes], bool, bool]:
    """Feed stdin and read the job's pipes (see ``_pump``), then wait for it up to the deadline."""
    outputs, timed_out, capped = _pump.pump(
        stdin, stdin_fd, read_fds, limits.wall_s, limits.output_kb << 10, start
    )
    if not timed_out and not capped:
        try:
            proc.wait(timeout=max(0.0, limits.wall_s - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            timed_out = True
    return outputs, timed_out, capped


def verdict_of(record: bytes, nonce: str) -> dict[str, Any] | None:
    """The harness's line, recognised by the nonce; anything else on the pipe is ignored."""
    for line in record.decode(errors="replace").splitlines():
        head, _, body = line.partition(" ")
        if secrets.compare_digest(head, nonce):
            try:
                return json.loads(body)
            except json.JSONDecodeError:
                return None
    return None
