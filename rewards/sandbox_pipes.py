"""Talking to a sandboxed process: feed stdin, read stdout/stderr/result with caps and a deadline."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import subprocess
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rewards.sandbox import Limits


def feed(fd: int, data: bytes) -> None:
    """Write a job config bigger than a pipe buffer (from a thread: the child reads as we write)."""
    with contextlib.suppress(OSError), os.fdopen(fd, "wb") as f:
        f.write(data)


def collect(
    proc: subprocess.Popen, stdin: bytes, result_r: int, limits: Limits, start: float
) -> tuple[dict[int, bytes], bool, bool]:
    """Feed stdin and read stdout, stderr and the result pipe until EOF, the cap or the deadline."""
    cap = limits.output_kb << 10
    readers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray(), result_r: bytearray()}
    pending = memoryview(stdin)
    timed_out = capped = False
    with selectors.DefaultSelector() as sel:
        for fd in readers:
            sel.register(fd, selectors.EVENT_READ)
        stdin_fd = proc.stdin.fileno()
        os.set_blocking(stdin_fd, False)
        if pending:
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        open_readers = len(readers)
        while open_readers:
            remaining = limits.wall_s - (time.monotonic() - start)
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=remaining):
                if key.fd == stdin_fd:
                    try:
                        pending = pending[os.write(stdin_fd, pending[: 1 << 16]) :]
                    except (BrokenPipeError, OSError):
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(stdin_fd)
                        proc.stdin.close()
                    continue
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fd)
                    open_readers -= 1
                    continue
                readers[key.fd] += data
                if len(readers[key.fd]) > cap:
                    capped = True
                    del readers[key.fd][cap:]
                    open_readers = 0
                    break
    if not proc.stdin.closed:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    if not timed_out and not capped:
        try:
            proc.wait(timeout=max(0.0, limits.wall_s - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            timed_out = True
    return {fd: bytes(buf) for fd, buf in readers.items()}, timed_out, capped


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
