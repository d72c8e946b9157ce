"""Run untrusted code once, with limits, and leave nothing behind.

Two modes (``docs/rewards.md`` says what each isolates and what it does not):

* ``bwrap`` (preferred, used when bubblewrap works here): read-only system directories,
  no view of the rest of the file system, a size-capped private tmpfs as cwd and /tmp, new
  user, pid, network, ipc, uts and cgroup namespaces, ``--die-with-parent``, an empty
  environment;
* ``rlimit`` (fallback): a private temp dir as cwd, a scrubbed environment, and new user +
  network namespaces where the kernel allows them.

Both: a new session/process group, hard rlimits (CPU, address space, processes, file
size, open files, no core dumps) set by the harness before any untrusted code runs, a
wall-clock limit, stdout/stderr caps, a separate unprivileged uid per run when we are root,
and, after every run, SIGKILL to the process group and to every process of the run's uid
(or carrying the run's environment marker). ``GSPO_TRL_SANDBOX=rlimit`` forces the fallback.
"""

from __future__ import annotations

import atexit
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
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rewards import sandbox_identity as ident
from rewards import sandbox_pipes as pipes

log = logging.getLogger(__name__)
IN_SANDBOX_FILES = ("_sandbox_harness.py", "_sandbox_server.py")
MODES = ("auto", "bwrap", "rlimit")


@dataclass(frozen=True)
class Limits:
    """Per-run limits. Seconds, MiB and counts; ``output_kb`` caps stdout and stderr each."""

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    processes: int = 64
    file_mb: int = 16
    open_files: int = 64
    output_kb: int = 1024
    tmpfs_mb: int = 64


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


def resolve_mode(mode: str = "auto") -> str:
    """``auto`` -> ``bwrap`` when bubblewrap runs here, else ``rlimit`` (with one warning)."""
    mode = os.environ.get("GSPO_TRL_SANDBOX", mode) if mode == "auto" else mode
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        mode = "bwrap" if bwrap_works() else "rlimit"
        if mode == "rlimit":
            _warn_fallback_once()
    elif mode == "bwrap" and not bwrap_works():
        raise RuntimeError(
            "sandbox mode 'bwrap' requested but bubblewrap is missing or cannot create namespaces"
        )
    return mode


@functools.lru_cache(maxsize=1)
def _warn_fallback_once() -> None:
    log.warning(
        "bubblewrap (bwrap) is not usable here: code rewards run in the rlimit fallback sandbox "
        "(weaker isolation, see docs/rewards.md); `apt-get install bubblewrap` to fix"
    )


@functools.lru_cache(maxsize=1)
def bwrap_works() -> bool:
    """One trial sandbox, run the way real runs are (as the sandbox uid when we are root)."""
    if shutil.which("bwrap") is None:
        return False
    try:
        with ident.sandbox_uid() as uid:
            argv = [*_bwrap_prefix(ident.sandbox_python(uid is not None), 1), "--", "/bin/true"]
            done = subprocess.run(argv, capture_output=True, timeout=30, **_identity(uid))
    except (OSError, subprocess.SubprocessError, RuntimeError) as err:
        log.info("bwrap probe failed: %s", err)
        return False
    if done.returncode != 0:
        log.info("bwrap probe failed: %s", done.stderr.decode(errors="replace").strip())
    return done.returncode == 0


def _identity(uid: int | None) -> dict[str, Any]:
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def _bwrap_prefix(python: str, tmpfs_mb: int) -> list[str]:
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for root in ident.python_roots(python):
        argv += ["--ro-bind", root, root]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmpfs_mb << 20), "--tmpfs", "/tmp"]
    return [*argv, "--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin:/bin"]


def run(
    job: dict[str, Any], stdin: bytes = b"", limits: Limits | None = None, mode: str = "auto"
) -> RunResult:
    """Run one job (see ``_sandbox_harness``) and return what it did, whatever it did."""
    limits = limits or Limits()
    mode = resolve_mode(mode)
    run_id = ident.new_run_id()
    nonce = secrets.token_hex(16)
    if mode == "bwrap" and os.environ.get("GSPO_TRL_SANDBOX_SERVERS", "1") != "0":
        return _run_in_server({**job, "nonce": nonce}, stdin, limits, nonce)
    with ident.sandbox_uid() as uid:
        python = ident.sandbox_python(uid is not None)
        # bwrap runs in its own tmpfs; only the fallback needs a private directory on disk.
        workdir = tempfile.mkdtemp(prefix="gspo-sandbox-") if mode == "rlimit" else None
        try:
            if workdir is not None and uid is not None:
                os.chown(workdir, uid, uid)
            config = {
                **job,
                "mode": mode,
                "limits": asdict(limits),
                "nonce": nonce,
                "workdir": workdir or "/tmp",
            }
            return _launch(config, stdin, limits, mode, uid, python, workdir, run_id, nonce)
        finally:
            if uid is None:
                ident.kill_marked(run_id)
            if workdir is not None:
                ident.remove_tree(workdir)


@functools.lru_cache(maxsize=1)
def shared_code_dir() -> str:
    """One world-readable copy of the in-sandbox code per process, for every run and every uid."""
    directory = tempfile.mkdtemp(prefix="gspo-sandbox-code-")
    os.chmod(directory, 0o755)
    for name in IN_SANDBOX_FILES:
        shutil.copy(Path(__file__).with_name(name), Path(directory) / name)
        os.chmod(Path(directory) / name, 0o644)
    atexit.register(shutil.rmtree, directory, True)
    return directory


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
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir or "/tmp", "LANG": "C.UTF-8", ident.MARKER: run_id}
    if mode == "bwrap":
        inside = ["--ro-bind", shared_code_dir(), "/opt/gspo", "--setenv", ident.MARKER, run_id]
        harness = "/opt/gspo/_sandbox_harness.py"
        argv = [*_bwrap_prefix(python, limits.tmpfs_mb), *inside, "--", python, "-I", "-S", harness]
    else:
        argv = [python, "-I", "-S", f"{shared_code_dir()}/_sandbox_harness.py"]
    argv += [str(config_r), str(result_w)]
    data = json.dumps(config).encode()
    small = len(data) < 60_000  # fits in the pipe buffer: no writer thread needed
    if small:
        os.write(config_w, data)
        os.close(config_w)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(config_r, result_w),
            cwd=workdir or "/",
            env=env,
            start_new_session=True,
            **_identity(uid),
        )
    finally:
        os.close(config_r)
        os.close(result_w)
    feeder = threading.Thread(target=pipes.feed, args=(config_w, data), daemon=True)
    if not small:
        feeder.start()
    try:
        outputs, timed_out, capped = pipes.collect(proc, stdin, result_r, limits, start)
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(result_r)
        if not small:
            feeder.join(timeout=5)
    verdict = pipes.verdict_of(outputs[result_r], nonce)
    stdout, stderr = outputs[proc.stdout.fileno()], outputs[proc.stderr.fileno()]
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()
    return RunResult(
        proc.returncode, stdout, stderr, verdict, timed_out, capped, time.monotonic() - start, mode
    )


def _run_in_server(job: dict[str, Any], stdin: bytes, limits: Limits, nonce: str) -> RunResult:
    """The fast path: a reused bwrap sandbox forks per job (``rewards.sandbox_servers``)."""
    from rewards import sandbox_servers

    start = time.monotonic()
    try:
        reply = sandbox_servers.run(job, stdin, limits, ident.sandbox_python(os.geteuid() == 0))
    except sandbox_servers.ServerGone as err:
        log.warning("sandbox server lost during a job (%s); the job fails", err)
        return RunResult(None, b"", b"", None, True, False, time.monotonic() - start, "bwrap")
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
    from rewards import sandbox_servers

    sandbox_servers.shutdown()
