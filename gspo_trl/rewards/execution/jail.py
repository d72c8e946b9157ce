"""What every sandbox shares: its limits, the bwrap command line, and the in-sandbox code.

The lowest module of :mod:`gspo_trl.rewards.execution` but :mod:`~gspo_trl.rewards.execution.identity`: the
fresh-sandbox path (``sandbox``) and the reused-server path (``servers``) both build their
sandboxes from here, so neither imports the other's internals.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gspo_trl.rewards.execution import identity as ident

log = logging.getLogger(__name__)
IN_SANDBOX_FILES = ("_harness.py", "_server.py", "_pump.py", "_seccomp.py", "_tmpfs.py")
IN_SANDBOX_DIR = "/opt/gspo"


@dataclass(frozen=True)
class Limits:
    """Per-run limits. Seconds, MiB and counts; ``output_kb`` caps stdout and stderr each.

    ``memory_mb`` is the job's whole address-space budget: without a memory cgroup the
    only hard bound is RLIMIT_AS, which is per process, so the job may run at most
    ``processes`` tasks (processes and threads, RLIMIT_NPROC) and each process gets
    ``memory_mb // processes``. That bounds what the job maps; ``tmpfs_mb`` (/tmp) and
    ``shm_mb`` (/dev/shm, bwrap only) are file systems in memory, on top of that. Memory
    that would be neither mapped nor in those (memfds, SysV segments, a tmpfs of the job's
    own) is refused by ``_seccomp``'s filter. ``tmpfs_files`` caps the files, directories and
    links of each writable tmpfs (its ``nr_inodes``, see ``_tmpfs``): each costs ~1 KiB of
    kernel memory that ``tmpfs_mb`` does not count, so 10,000 bound it to ~10 MiB.
    """

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    processes: int = 2
    file_mb: int = 16
    open_files: int = 64
    output_kb: int = 1024
    tmpfs_mb: int = 64
    shm_mb: int = 16
    tmpfs_files: int = 10_000


def as_user(uid: int | None) -> dict[str, Any]:
    """``subprocess.Popen`` keyword arguments that start a process as ``uid`` (None: as us)."""
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def bwrap_argv(python: str, limits: Limits, run_id: str) -> list[str]:
    """bwrap's command line up to ``--``: namespaces, read-only system, the in-sandbox code,
    and exactly two writable places, /tmp and /dev/shm, each a size-capped tmpfs.

    bwrap builds its root and /dev on tmpfs file systems owned by the sandbox's uid and
    without a size cap (half of RAM each); both are remounted read-only once built.
    ``--as-pid-1``: our own program is the pid namespace's init, not bwrap's reaper (which
    runs as the jobs' uid, dumpable: a job could ptrace it and outlive every clean-up).
    /proc/sys is read-only (bwrap leaves the IPC namespace's sysctls writable).
    """
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--clearenv"]
    for root in ident.python_roots(python):
        argv += ["--ro-bind", root, root]
    argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    argv += ["--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp"]
    argv += ["--size", str(limits.shm_mb << 20), "--tmpfs", "/dev/shm"]
    argv += ["--ro-bind", shared_code_dir(), IN_SANDBOX_DIR, "--remount-ro", "/dev", "--remount-ro", "/"]
    for key, value in sandbox_env(run_id).items():
        argv += ["--setenv", key, value]
    return [*argv, "--chdir", "/tmp"]


@functools.lru_cache(maxsize=1)
def warn_files_uncapped() -> None:
    """Once per process: ``_tmpfs`` could not cap the files of a job's writable places."""
    log.warning(
        "sandbox: the kernel refused the namespaces that cap the number of files in a job's "
        "writable places (their bytes are capped): a job can hold kernel memory with millions of "
        "empty files while it runs (on Ubuntu 24.04 AppArmor's bwrap profile refuses nested "
        "user namespaces)"
    )


def sandbox_env(run_id: str, home: str = "/tmp") -> dict[str, str]:
    """The whole environment of sandboxed code: no secrets, one thread per numeric library."""
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8", **threads, ident.MARKER: run_id}


def private_dir(kind: str) -> str:
    """A new directory under the temp dir named for this process, so a later one can tell
    whether its owner is gone (:func:`remove_stale_dirs`)."""
    return tempfile.mkdtemp(prefix=f"gspo-sandbox-{kind}{os.getpid()}-")


_OWNED = re.compile(r"gspo-sandbox-(?:code-)?(\d+)-")


def remove_stale_dirs() -> int:
    """Remove sandbox directories whose owning process is dead (a trainer SIGKILLed mid-run
    cannot clean up after itself); returns how many were removed."""
    removed = 0
    for entry in os.scandir(tempfile.gettempdir()):
        match = _OWNED.match(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False) or _alive(int(match.group(1))):
            continue
        ident.remove_tree(entry.path)
        removed += 0 if os.path.exists(entry.path) else 1
    if removed:
        log.info("removed %d sandbox directories left by dead processes", removed)
    return removed


_removals: queue.SimpleQueue[str] = queue.SimpleQueue()
_remover: threading.Thread | None = None
_remover_lock = threading.Lock()


def remove_later(path: str) -> None:
    """Remove a run's private directory on a background thread, so the reward call never waits.

    Why: in the rlimit mode a job whose kernel refuses it a capped tmpfs (``_tmpfs``) writes
    on the host's disk, and removing a flood of files took 11-88 s after a 3 s timeout, all of
    it inside the reward call. Nothing leaks: what is still queued when this process dies
    carries its pid in the name, and :func:`remove_stale_dirs` removes it on the next start.
    """
    global _remover
    _removals.put(path)
    with _remover_lock:
        if _remover is None:
            _remover = threading.Thread(target=_remove_queued, name="sandbox-remover", daemon=True)
            _remover.start()


def _remove_queued() -> None:
    global _remover
    while True:
        try:
            path = _removals.get(timeout=1.0)
        except queue.Empty:
            with _remover_lock:  # exit only with nothing queued: remove_later starts a new one
                if _removals.empty():
                    _remover = None
                    return
            continue
        try:
            ident.remove_tree(path)
        except Exception as err:  # never lose the thread; a dead owner's leftovers go at next start
            log.warning("could not remove sandbox directory %s (%s: %s)", path, type(err).__name__, err)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.lru_cache(maxsize=1)
def shared_code_dir() -> str:
    """One world-readable copy of the in-sandbox code per process, for every run and every uid."""
    remove_stale_dirs()
    directory = private_dir("code-")
    os.chmod(directory, 0o755)
    for name in IN_SANDBOX_FILES:
        shutil.copy(Path(__file__).with_name(name), Path(directory) / name)
        os.chmod(Path(directory) / name, 0o644)
    atexit.register(shutil.rmtree, directory, True)
    return directory
