"""The run lock: one live run per output directory (gspo_trl.training.safety.run_dir takes it)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from gspo_trl.core.errors import RunDirError

logger = logging.getLogger(__name__)

LOCK_FILE = ".gspo-trl.lock"


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    current = _process_start(pid)
    return started is None or current is None or current == started  # a reused pid is not the holder


class RunLock:
    """OUTPUT_DIR/LOCK_FILE, held with `fcntl.flock` for the life of the run and holding its
    holder as JSON (for the message a second run gets).

    The kernel decides who holds it: one process among any number racing, and a holder that
    dies (kill -9, a crash, OOM) lets go with its last file descriptor, so a stale lock is never
    removed by anyone and no take-over can race another. The file is never unlinked (a process
    blocked on an unlinked file would lock a name no one else sees); a clean release empties
    it, so a file still naming a holder that no longer runs is what a crashed run left: taking
    it over is announced. A recorded holder that still runs but holds no flock (a gspo-trl older
    than this lock) is respected. On NFS, Linux implements flock with the server's byte-range
    locks (nfs(5), "local_lock"), so it holds across hosts too.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "process_start": _process_start(os.getpid()),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            raise RunDirError(
                f"output_dir: cannot open the run lock {self.path}: {error.strerror}; "
                "remove what is there or give another output_dir"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            recorded = _read_holder(fd)
            os.close(fd)
            raise self._in_use(recorded) from None
        except OSError as error:
            os.close(fd)
            raise RunDirError(f"output_dir: cannot lock {self.path}: {error.strerror}") from None
        recorded = _read_holder(fd)
        if recorded is not None and self._still_running(recorded):
            os.close(fd)  # an older gspo-trl's lock (no flock), its run still alive
            raise self._in_use(recorded)
        if recorded is not None:
            logger.warning(
                "output_dir: taking over the lock %s of pid %s (started %s), which no longer runs",
                self.path,
                recorded.get("pid"),
                recorded.get("since"),
            )
        elif os.fstat(fd).st_size:
            logger.warning("output_dir: taking over an unreadable run lock %s", self.path)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(self.holder).encode(), 0)
        except OSError as error:  # a full disk (ENOSPC), a quota (EDQUOT), a file size limit (EFBIG)
            os.close(fd)
            code = errno.errorcode.get(error.errno or 0, "?")
            raise RunDirError(
                f"output_dir: cannot write the run lock {self.path}: {error.strerror} ({code}); "
                "free space there or give another output_dir"
            ) from None
        self._fd = fd

    def _still_running(self, recorded: dict[str, Any]) -> bool:
        try:
            pid, host = int(recorded["pid"]), str(recorded["host"])
        except (KeyError, TypeError, ValueError):
            return False
        if pid == os.getpid() or host != socket.gethostname():
            return False  # another host's dead lock-less holder cannot be told from a live one: flock rules
        return _alive(pid, recorded.get("process_start"))

    def _in_use(self, recorded: dict[str, Any] | None) -> RunDirError:
        if recorded is None:  # the winner of a race has not written its name yet
            who = "another run"
        else:
            host = recorded.get("host")
            elsewhere = "" if host == socket.gethostname() else " (another host)"
            since = recorded.get("since")
            who = f"another run: pid {recorded.get('pid')} on {host}, since {since}{elsewhere}"
        return RunDirError(
            f"output_dir {str(self.path.parent)!r} is in use by {who}; wait for it or give another output_dir"
        )

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)  # empty: not a crashed run's lock
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None


def _read_holder(fd: int) -> dict[str, Any] | None:
    """The holder recorded in the lock file, or None (empty, partly written, not ours)."""
    try:
        content = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) and "pid" in content else None
