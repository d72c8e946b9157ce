"""Run untrusted code once, with limits, and leave nothing behind.

Two modes: ``bwrap`` (the default; refused with :class:`SandboxUnavailable` when bubblewrap does
not work here): read-only system directories, no view of the rest of the file system, size-capped
writable tmpfs made for each job, new namespaces, ``--die-with-parent``, an empty environment;
``rlimit`` (only when chosen explicitly, or ``GSPO_TRL_SANDBOX=rlimit``; it hides nothing of the
file system): a scrubbed environment and, where the kernel allows, new namespaces with a capped
/tmp and /dev/shm.

Both: a new process group, hard rlimits and a seccomp filter (``_seccomp``) set before any
untrusted code runs, a wall-clock limit, output caps, a separate unprivileged uid per run when we
are root, and, after every run, SIGKILL to the process group and to every process of the run's
uid (or carrying the run's marker). What each mode isolates and what it does not:
``docs/rewards.md``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from gspo_trl.rewards.execution import _pump, pipes, servers
from gspo_trl.rewards.execution import identity as ident
from gspo_trl.rewards.execution.jail import (
    IN_SANDBOX_DIR,
    Limits,
    as_user,
    bwrap_argv,
    private_dir,
    remove_later,
    sandbox_env,
    shared_code_dir,
    warn_files_uncapped,
)

__all__ = [
    "MODES",
    "Limits",
    "RunResult",
    "SandboxUnavailable",
    "bwrap_works",
    "resolve_mode",
    "run",
    "shutdown",
]
log = logging.getLogger(__name__)
MODES = ("bwrap", "rlimit")


@dataclass
class RunResult:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    verdict: dict[str, Any] | None  # the harness's record for ``check`` jobs, None if absent
    timed_out: bool
    output_capped: bool
    wall_s: float
    mode: str
    # The sandbox, not the completion, failed: the job's code never ran (``_harness``'s ready
    # byte never came, in a fresh sandbox too) or the server was lost mid-job. Scores 0 like a
    # failure, but the reward counts these and warns (a batch of them is an attack or a broken
    # machine, never the policy's doing).
    sandbox_fault: bool = False


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run here and the weaker fallback was not chosen explicitly."""


def resolve_mode(mode: str = "bwrap") -> str:
    """``bwrap`` (the default) when bubblewrap runs here, else :class:`SandboxUnavailable`;
    ``rlimit`` only when asked for (``mode="rlimit"`` or ``GSPO_TRL_SANDBOX=rlimit``), with
    one warning naming what it does not protect. ``auto`` is read as ``bwrap``."""
    mode = os.environ.get("GSPO_TRL_SANDBOX") or mode
    mode = "bwrap" if mode == "auto" else mode
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {MODES}, got {mode!r}")
    if mode == "rlimit":
        _warn_fallback_once()
    elif not bwrap_works():
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is missing or cannot create namespaces here, so untrusted code "
            "cannot be sandboxed: install it (`apt-get install bubblewrap`), or accept the weaker "
            "fallback explicitly with the code reward parameter `sandbox: rlimit` (see docs/rewards.md)"
        )
    return mode


@functools.lru_cache(maxsize=1)
def _warn_fallback_once() -> None:
    log.warning(
        "code rewards run in the rlimit sandbox, as asked. It does NOT hide the file system "
        "(completions can read the dataset's tests and answers, the checkout, other processes' "
        "command lines), and as a non-root user runs code as your own "
        "uid; install bubblewrap and use `sandbox: bwrap` for training"
    )


@functools.lru_cache(maxsize=1)
def _warn_network_once() -> None:
    log.warning(
        "rlimit sandbox: the kernel refused a new network namespace, so sandboxed code "
        "can reach the network; install bubblewrap or allow unprivileged user namespaces"
    )


@functools.lru_cache(maxsize=1)
def bwrap_works() -> bool:
    """One trial sandbox, run the way real runs are (as the sandbox uid when we are root)."""
    if shutil.which("bwrap") is None:
        return False
    try:
        with ident.sandbox_uid() as uid:
            python = ident.sandbox_python(uid is not None)
            argv = [*bwrap_argv(python, Limits(tmpfs_mb=1, shm_mb=1), "probe"), "--", "/bin/true"]
            done = subprocess.run(argv, capture_output=True, timeout=30, **as_user(uid))
    except (OSError, subprocess.SubprocessError, RuntimeError) as err:
        log.info("bwrap probe failed: %s", err)
        return False
    if done.returncode != 0:
        log.info("bwrap probe failed: %s", done.stderr.decode(errors="replace").strip())
    return done.returncode == 0


def run(
    job: dict[str, Any], stdin: bytes = b"", limits: Limits | None = None, mode: str = "bwrap"
) -> RunResult:
    """Run one job (see ``_harness``) and return what it did, whatever it did."""
    limits = limits or Limits()
    mode = resolve_mode(mode)
    run_id = ident.new_run_id()
    nonce = secrets.token_hex(16)
    if mode == "bwrap" and os.environ.get("GSPO_TRL_SANDBOX_SERVERS", "1") != "0" and servers.reusable():
        return _run_in_server({**job, "nonce": nonce}, stdin, limits, nonce)
    with ident.sandbox_uid() as uid:
        python = ident.sandbox_python(uid is not None)
        # bwrap runs in its own tmpfs; only the fallback needs a private directory on disk.
        workdir = private_dir("") if mode == "rlimit" else None
        try:
            if workdir is not None and uid is not None:
                os.chown(workdir, uid, uid)
            config = {
                **job,
                "mode": mode,
                "limits": asdict(limits),
                "nonce": nonce,
                "workdir": workdir or "/tmp",
                "nproc_overhead": 0,  # bwrap runs no init of its own (--as-pid-1)
            }
            return _launch(config, stdin, limits, mode, uid, python, workdir, run_id, nonce)
        finally:
            if uid is None:
                ident.kill_marked(run_id)
            if workdir is not None:
                remove_later(workdir)


def _launch(
    config: dict[str, Any],
    stdin: bytes,
    limits: Limits,
    mode: str,
    uid: int | None,
    python: str,
    workdir: str | None,
    run_id: str,
    nonce: str,
) -> RunResult:
    config_r, config_w = os.pipe()
    result_r, result_w = os.pipe()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ready_r, ready_w = os.pipe()
    env = sandbox_env(run_id, home=workdir or "/tmp")
    if mode == "bwrap":
        harness = f"{IN_SANDBOX_DIR}/_harness.py"
        argv = [*bwrap_argv(python, limits, run_id), "--", python, "-I", "-S", harness]
    else:
        argv = [python, "-I", "-S", f"{shared_code_dir()}/_harness.py"]
    argv += [str(config_r), str(result_w), str(ready_w)]
    data = json.dumps(config).encode()
    small = len(data) < 60_000  # fits in the pipe buffer: no writer thread needed
    if small:
        os.write(config_w, data)
        os.close(config_w)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=in_r,
            stdout=out_w,
            stderr=err_w,
            pass_fds=(config_r, result_w, ready_w),
            cwd=workdir or "/",
            env=env,
            start_new_session=True,
            **as_user(uid),
        )
    except BaseException:
        for fd in (in_w, out_r, err_r, result_r, ready_r):
            os.close(fd)
        raise
    finally:
        for fd in (config_r, result_w, in_r, out_w, err_w, ready_w):
            os.close(fd)
    feeder = threading.Thread(target=pipes.feed, args=(config_w, data), daemon=True)
    if not small:
        feeder.start()
    try:
        outputs, timed_out, capped = pipes.collect(proc, stdin, in_w, [out_r, err_r, result_r], limits, start)
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        ready = _pump.read_ready(ready_r)
        for fd in (out_r, err_r, result_r):
            os.close(fd)
        if not small:
            feeder.join(timeout=5)
    verdict = pipes.verdict_of(outputs[result_r], nonce)
    if verdict is not None and verdict.get("network_isolated") is False:
        _warn_network_once()
    stdout, stderr = outputs[out_r], outputs[err_r]
    if ready == b"u":
        warn_files_uncapped()
    fault = ready not in (b"r", b"u") and not timed_out
    if fault:
        log.warning("sandbox: a job failed before its code ran (%s)", ready[1:].decode(errors="replace")
                    or f"exit status {proc.returncode}")  # fmt: skip
    wall_s = time.monotonic() - start
    return RunResult(proc.returncode, stdout, stderr, verdict, timed_out, capped, wall_s, mode, fault)


def _run_in_server(job: dict[str, Any], stdin: bytes, limits: Limits, nonce: str) -> RunResult:
    """The fast path: a reused bwrap sandbox forks per job (:mod:`gspo_trl.rewards.execution.servers`)."""
    start = time.monotonic()
    try:
        reply = servers.run(job, stdin, limits, ident.sandbox_python(os.geteuid() == 0))
    except servers.HarnessFailed as err:
        log.warning("sandbox: %s; the job fails", err)
        return RunResult(None, b"", b"", None, False, False, time.monotonic() - start, "bwrap", True)
    except (servers.ServerGone, ident.Unkillable) as err:
        log.warning("sandbox server lost during a job (%s); the job fails and is replaced", err)
        return RunResult(None, b"", b"", None, True, False, time.monotonic() - start, "bwrap", True)
    out = {k: base64.b64decode(reply[k]) for k in ("stdout", "stderr", "result")}
    return RunResult(
        reply["returncode"],
        out["stdout"],
        out["stderr"],
        pipes.verdict_of(out["result"], nonce),
        reply["timed_out"],
        reply["capped"],
        time.monotonic() - start,
        "bwrap",
    )


def shutdown() -> None:
    """Kill the reusable bwrap sandboxes of this process (they also die at exit)."""
    servers.shutdown()
