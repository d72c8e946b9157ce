"""Long-lived bwrap sandboxes, each running ``_server``, reused across test runs.

A fresh sandbox per test run spends most of its time starting bwrap and Python; a server
sandbox pays that once and then forks per job (see ``_server`` for how jobs are
kept apart). Each server holds its own unprivileged uid (when we are root) for its whole
life, runs one job at a time, and is replaced after ``MAX_JOBS`` jobs, after any job it
could not clean up after, after any failure of the control channel, when its init is no
longer the server we started or no longer carries the limits, priority, scheduling policy
and affinity bwrap started it with (:meth:`_Server.tampered`, checked from outside before
every reuse, see ``server_state``), and after a job that failed before running its code (the
harness could not set the job up: the server's state was tampered with; that job is run
again once in a fresh sandbox, so an attacker cannot turn honest jobs into zeros).
``shutdown()`` kills them all (also run at exit).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import logging
import os
import selectors
import signal
import struct
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from gspo_trl.rewards.execution import identity as ident
from gspo_trl.rewards.execution import server_state
from gspo_trl.rewards.execution.jail import (
    IN_SANDBOX_DIR,
    Limits,
    as_user,
    bwrap_argv,
    sandbox_env,
    warn_files_uncapped,
)
from gspo_trl.rewards.execution.server_state import InitProcess

log = logging.getLogger(__name__)
MAX_JOBS = 500
CONTROL_MARGIN_S = 10.0  # beyond the job's wall limit, for the server's own clean-up


class HarnessFailed(RuntimeError):
    """A job failed before its code ran, in a fresh sandbox too: it cannot be scored."""


class ServerGone(RuntimeError):
    """The server sandbox died or stopped answering; its job counts as failed once started."""

    def __init__(self, message: str, job_started: bool = True) -> None:
        super().__init__(message)
        self.job_started = job_started


class _Server:
    def __init__(self, python: str, limits: Limits) -> None:
        self._uid_hold = ident.sandbox_uid()
        self.uid = self._uid_hold.__enter__()
        self.run_id = ident.new_run_id()
        argv = [
            *bwrap_argv(python, limits, self.run_id),
            "--",
            python,
            "-I",
            "-S",
            f"{IN_SANDBOX_DIR}/_server.py",
            *(str(n) for n in (limits.tmpfs_mb, limits.shm_mb, limits.tmpfs_files)),
        ]
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd="/",
                env=sandbox_env(self.run_id),
                start_new_session=True,
                **as_user(self.uid),
            )
        except BaseException:
            self._uid_hold.__exit__(None, None, None)
            raise
        self.jobs = 0
        self.cmdline = b"".join(arg.encode() + b"\0" for arg in argv[argv.index("--") + 1 :])
        self.init: InitProcess | None = None

    def tampered(self) -> str | None:
        """Why this sandbox must not be reused, or None: its init (the server, pid 1 inside)
        must be the process we started, still non-dumpable, untraced, not stopped, with one
        thread and no child left (every process of the namespace descends from it), and carry
        bwrap's limits, priority, policy and affinity (what its jobs inherit)."""
        now = InitProcess.of(self.proc.pid)
        if now is None:
            return "its init is gone"
        if now.cmdline != self.cmdline:
            return f"its init runs another command ({now.cmdline[:80]!r})"
        self.init = self.init or now
        uid = self.uid if self.uid is not None else os.getuid()
        return self.init.differs(now, uid) or server_state.changed(self.proc.pid, now.pid)

    def run(self, job: dict[str, Any], stdin: bytes, wall_s: float) -> dict[str, Any]:
        payload = json.dumps({"job": job, "stdin": base64.b64encode(stdin).decode()}).encode()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(struct.pack(">I", len(payload)) + payload)
            self.proc.stdin.flush()
        except OSError as err:
            raise ServerGone(f"cannot send a job: {err}", job_started=False) from err
        self.jobs += 1
        deadline = time.monotonic() + wall_s + CONTROL_MARGIN_S
        head = self._read(4, deadline)
        try:
            return json.loads(self._read(struct.unpack(">I", head)[0], deadline))
        except ValueError as err:
            raise ServerGone(f"unreadable reply: {err}") from err

    def _read(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd, data = self.proc.stdout.fileno(), b""
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(data) < n:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    raise ServerGone("no answer within the wall limit plus margin")
                chunk = os.read(fd, n - len(data))
                if not chunk:
                    raise ServerGone(f"sandbox exited (status {self.proc.poll()})")
                data += chunk
        return data

    def close(self) -> None:
        """Kill the sandbox and everything of its uid; never raises (see ``identity.sandbox_uid``
        for a uid whose processes outlive SIGKILL: it is set aside, not reused)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        try:
            if self.uid is None:
                ident.kill_marked(self.run_id)
        finally:
            self._uid_hold.__exit__(None, None, None)


_idle: dict[tuple[str, int, int, int], list[_Server]] = {}
_lock = threading.Lock()
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")


def run(job: dict[str, Any], stdin: bytes, limits: Limits, python: str) -> dict[str, Any]:
    """Run one job in an idle server sandbox (started if none), return the server's reply.

    A job the server could not start (``harness_failed``: its code never ran) retires that
    server and runs once more in a fresh one; :class:`HarnessFailed` if it fails there too.
    """
    reply = _run_once(job, stdin, limits, python)
    if reply.get("harness_failed"):
        log.warning(
            "sandbox: a job failed before its code ran (%s); that sandbox was tampered with by an "
            "earlier job and is retired, the job runs again in a fresh one",
            reply.get("harness_error", "no detail"),
        )
        reply = _run_once(job, stdin, limits, python, fresh=True)
        if reply.get("harness_failed"):
            raise HarnessFailed(
                f"a job failed before its code ran, in a fresh sandbox too: {reply['harness_error']}"
            )
    return reply


def _run_once(
    job: dict[str, Any], stdin: bytes, limits: Limits, python: str, fresh: bool = False
) -> dict[str, Any]:
    key = (python, limits.tmpfs_mb, limits.shm_mb, limits.tmpfs_files)
    config = {**job, "mode": "bwrap", "limits": asdict(limits)}
    for attempt in (1, 2):
        server = None
        if not fresh:
            server = _take_idle(key)
        if server is None:
            # bwrap's --die-with-parent follows the *thread* that started it, so servers are
            # started from one thread that lives as long as the process, not from the caller's.
            server = _spawner.submit(_Server, python, limits).result()
        try:
            reply = server.run(config, stdin, limits.wall_s)
            break
        except ServerGone as err:
            server.close()
            if attempt == 2 or err.job_started:
                raise
    if reply.get("files_capped") is False:
        warn_files_uncapped()
    if reply.get("fresh_places") is False:
        _stop_reuse()
    if not reply.get("clean") and not reply.get("harness_failed"):
        log.warning("sandbox server could not clean up after a job (left files or processes); replaced")
    # A server that could not give fresh places ran its one job and is exiting.
    exiting = server.proc.poll() is not None or reply.get("fresh_places") is False
    tampered = None if exiting else server.tampered()
    if tampered:
        log.warning("sandbox retired after a job: %s", tampered)
    if server.jobs >= MAX_JOBS or not reply.get("clean") or exiting or tampered:
        server.close()
    else:
        with _lock:
            _idle.setdefault(key, []).append(server)
    return reply


_reusable = True


def reusable() -> bool:
    """False once a server could not give its jobs fresh places (the kernel refused it the
    namespaces): every later job then gets a fresh sandbox of its own, slower but as isolated."""
    return _reusable


def _stop_reuse() -> None:
    global _reusable
    if _reusable:
        log.warning(
            "sandbox: the kernel refused the namespaces that give each job of a reused sandbox "
            "its own /tmp, /dev/shm and IPC; every job now starts a sandbox of its own (slower)"
        )
    _reusable = False


def _take_idle(key: tuple[str, int, int, int]) -> _Server | None:
    """An idle server still as we left it (:meth:`_Server.tampered` again: nothing may have
    changed it while idle, but a job never lands in a sandbox that was not checked right before)."""
    while True:
        with _lock:
            server = _idle.get(key, []).pop() if _idle.get(key) else None
        if server is None:
            return None
        tampered = None if server.proc.poll() is None else "it exited"
        tampered = tampered or server.tampered()
        if not tampered:
            return server
        log.warning("idle sandbox retired before reuse: %s", tampered)
        server.close()


def idle_pids() -> list[int]:
    """The bwrap pids of the idle server sandboxes (which sandbox a job will land in)."""
    with _lock:
        return sorted(s.proc.pid for group in _idle.values() for s in group)


def shutdown() -> None:
    """Kill every idle server sandbox (and everything of its uid)."""
    with _lock:
        servers = [s for group in _idle.values() for s in group]
        _idle.clear()
    for server in servers:
        server.close()


atexit.register(shutdown)
