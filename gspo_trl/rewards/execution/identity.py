"""Who untrusted code runs as, which Python it runs, and how every process of a run is found and killed.

Running as root, each sandbox run gets its own unprivileged uid from a small range, held
with an ``flock`` so concurrent runs (threads or other processes) never share one. That
gives RLIMIT_NPROC its meaning (the kernel does not apply it to root), keeps untrusted code
from signalling the trainer, and makes cleanup exact: afterwards every process of that uid
is killed. As an ordinary user the run keeps the caller's uid; then namespaces (bwrap's,
or the harness's own ``unshare``) bound the process count, and cleanup relies on the
process group, bwrap's pid namespace, and an environment marker.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

UID_BASE = int(os.environ.get("GSPO_TRL_SANDBOX_UID_BASE", "61000"))
UID_SLOTS = 256
MARKER = "GSPO_TRL_SANDBOX_RUN"
_KILL = shutil.which("kill", path="/usr/bin:/bin")
KILL_DEADLINE_S = 10.0  # a process exits only once its memory is freed: big ones take a while


class Unkillable(RuntimeError):
    """Processes of a sandbox uid survived SIGKILL for ``KILL_DEADLINE_S`` seconds."""


def new_run_id() -> str:
    """Marker value for one run's processes: our pid first, so each process finds its own."""
    return f"{os.getpid()}-{os.urandom(6).hex()}"


@contextlib.contextmanager
def sandbox_uid() -> Iterator[int | None]:
    """An unprivileged uid held exclusively for one run when we are root, else None.

    A uid whose processes outlive SIGKILL is left marked dirty and skipped; nothing here
    raises because of what sandboxed code did (only when all uids are unusable).
    """
    if os.geteuid() != 0:
        yield None
        return
    lock_dir = Path(tempfile.gettempdir()) / "gspo-trl-sandbox-uids"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    for uid in range(UID_BASE, UID_BASE + UID_SLOTS):
        fd = os.open(lock_dir / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            if os.pread(fd, 5, 0) != b"clean":  # the previous holder crashed before cleaning up
                kill_uid(uid)
        except Unkillable as err:
            log.warning("sandbox uid %d skipped: %s", uid, err)
            os.close(fd)
            continue
        os.pwrite(fd, b"dirty", 0)
        try:
            yield uid
        finally:
            try:
                kill_uid(uid)
                os.pwrite(fd, b"clean", 0)
            except Unkillable as err:  # stays dirty: the next holder kills again or skips it
                log.warning("sandbox uid %d set aside: %s", uid, err)
            finally:
                os.close(fd)  # releases the lock
        return
    raise RuntimeError(f"all {UID_SLOTS} sandbox uids from {UID_BASE} are busy")


def _status(pid: int | str) -> dict[str, str] | None:
    """State and Uid lines of /proc/<pid>/status (None once it is gone). Its owner (the
    directory's st_uid) would not do: a process that makes itself non-dumpable shows as root."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.split(":", 1) for line in f if line.startswith(("State:", "Uid:")))
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
        return None


def _real_uid(pid: int) -> int | None:
    status = _status(pid)
    return int(status["Uid"].split()[0]) if status else None


def processes_of_uid(uid: int) -> list[int]:
    """Live (not zombie) pids whose real uid is ``uid``, from /proc."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        status = _status(entry.name)
        if status and int(status["Uid"].split()[0]) == uid and status["State"].split()[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def processes_with_marker(run_id: str) -> list[int]:
    """Pids whose environment carries this run's marker (readable for our own processes)."""
    needle = f"{MARKER}={run_id}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid``, two ways each round, /proc then confirming none is left.

    From here (root), pid by pid through a pidfd, so a pid reused since /proc was read is never
    hit: the sandboxed code cannot stop these signals. And ``kill -9 -1`` run as that uid, which
    reaches all of them at once, so a fork bomb cannot outrun the pid-by-pid loop. Either alone
    fails: a daemon of the uid that SIGKILLs everything it may (the helper, being of its uid, too)
    kills the helper before it signals, and a fork bomb refills the pids as fast as they die.
    Raises :class:`Unkillable` when some are still there after ``KILL_DEADLINE_S``.
    """
    deadline = time.monotonic() + KILL_DEADLINE_S
    while time.monotonic() < deadline:
        pids = processes_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            _kill_if_still_of(pid, uid)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _kill_all_as(uid)
        time.sleep(0.01)
    raise Unkillable(f"processes of sandbox uid {uid} survive SIGKILL: {processes_of_uid(uid)}")


def _kill_if_still_of(pid: int, uid: int) -> None:
    """SIGKILL ``pid`` if, once pinned by a pidfd, it still belongs to ``uid``."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        if _real_uid(pid) == uid:  # the pidfd holds this pid: no reuse from here on
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def _kill_all_as(uid: int) -> None:
    subprocess.run(
        [_KILL, "-9", "-1"]
        if _KILL
        else [sandbox_python(True), "-I", "-S", "-c", "import os; os.kill(-1, 9)"],
        user=uid,
        group=uid,
        extra_groups=[],
        env={},
        capture_output=True,
        check=False,
        timeout=30,
    )


def kill_marked(run_id: str) -> None:
    for _ in range(20):
        pids = processes_with_marker(run_id)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def sandbox_python(run_as_other_uid: bool) -> str:
    """An interpreter the sandboxed uid can execute: ours when reachable, else the system's.

    Under root, ours often lives in /root (pyenv, conda) where another uid cannot reach it;
    the test harness needs only the standard library, so any Python 3 does.
    """
    ours = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if not run_as_other_uid or _world_executable(ours):
        return ours
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        real = os.path.realpath(candidate)
        if os.path.exists(real) and _world_executable(real):
            return real
    raise RuntimeError(
        f"no Python interpreter reachable by an unprivileged uid ({ours} is not); install python3 system-wide"
    )


def _world_executable(path: str) -> bool:
    parts = Path(path).parents
    if not all(p.stat().st_mode & stat.S_IXOTH for p in parts):
        return False
    mode = Path(path).stat().st_mode
    return bool(mode & stat.S_IXOTH and mode & stat.S_IROTH)


def python_roots(python: str) -> list[str]:
    """Directories to bind read-only into bwrap so ``python`` and its standard library work."""
    prefix = str(Path(python).resolve().parent.parent)
    roots = ["/usr", "/lib", "/lib64", "/bin", "/etc/alternatives", "/etc/ld.so.cache"]
    if not any(prefix == r or prefix.startswith(r + "/") for r in roots):
        roots.append(prefix)
    return [r for r in roots if os.path.exists(r)]


def remove_tree(path: str) -> None:
    """rmtree that first restores permissions a sandboxed program may have removed, inside
    ``path`` only: never on its parent (once, two processes removing the same stale directory
    made the loser chmod the parent, the host's /tmp, to 0700), and what is gone already is
    not an error."""
    root = os.path.abspath(path)

    def fix(func, target, exc_info):  # type: ignore[no-untyped-def]
        if isinstance(exc_info[1], FileNotFoundError):
            return
        with contextlib.suppress(OSError):
            if os.path.abspath(target) != root:
                os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
        with contextlib.suppress(OSError):
            func(target)

    try:
        shutil.rmtree(path, onerror=fix)
    except RecursionError:  # Python < 3.12 recurses per level: a job nested directories deeper
        subprocess.run(["rm", "-rf", "--one-file-system", "--", path], capture_output=True, check=False)
