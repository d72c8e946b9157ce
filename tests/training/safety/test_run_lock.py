"""The run lock under a race: several real processes start together on one output_dir whose lock
a dead run left behind (or left unreadable), and exactly one of them may hold it.

Each round forks RACERS processes that wait at a barrier, try `RunLock.acquire` at once, report
whether they hold it, and keep holding it until every racer has reported, so two holders would
be seen together. The old take-over (read the stale file, unlink it, link a new one) let two or
three through in some rounds: a racer unlinked the lock a faster racer had just taken.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import resource
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from gspo_trl.core.errors import RunDirError
from gspo_trl.training.safety.run_dir import LOCK_FILE, RunLock

RACERS = 6
ROUNDS = 10


def _race(path: str, barrier, results, release) -> None:
    lock = RunLock(Path(path))
    barrier.wait()
    try:
        lock.acquire()
    except RunDirError as error:
        results.put(("refused", str(error)))
        return
    results.put(("held", ""))
    release.wait()
    lock.release()


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


STALE_LOCKS = {
    "left by a dead run": lambda: json.dumps(
        {"pid": _dead_pid(), "host": socket.gethostname(), "process_start": "1", "since": "then"}
    ),
    "unreadable": lambda: "{not json",
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stale", list(STALE_LOCKS))
def test_exactly_one_of_several_racing_processes_takes_a_stale_lock(tmp_path: Path, stale: str) -> None:
    context = multiprocessing.get_context("fork")
    holders_per_round = []
    for round_index in range(ROUNDS):
        path = tmp_path / f"round-{round_index}" / LOCK_FILE
        path.parent.mkdir()
        path.write_text(STALE_LOCKS[stale]())
        barrier, results, release = context.Barrier(RACERS), context.Queue(), context.Event()
        racers = [
            context.Process(target=_race, args=(str(path), barrier, results, release)) for _ in range(RACERS)
        ]
        for racer in racers:
            racer.start()
        outcomes = [results.get(timeout=120) for _ in racers]
        release.set()
        for racer in racers:
            racer.join(timeout=60)
            assert racer.exitcode == 0
        holders_per_round.append(sum(kind == "held" for kind, _ in outcomes))
        refusals = [message for kind, message in outcomes if kind == "refused"]
        assert all("is in use by another run" in message for message in refusals), refusals
    assert holders_per_round == [1] * ROUNDS, f"holders per round: {holders_per_round}"


def test_a_released_lock_is_free_and_names_no_one(tmp_path: Path) -> None:
    path = tmp_path / LOCK_FILE
    first = RunLock(path)
    first.acquire()
    with pytest.raises(RunDirError, match=f"pid {first.holder['pid']} on {socket.gethostname()}"):
        RunLock(path).acquire()
    first.release()
    assert path.read_text() == "", "a released lock still names its holder"
    second = RunLock(path)
    second.acquire()
    second.release()


def test_a_lock_path_that_is_a_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).mkdir()
    with pytest.raises(RunDirError, match=r"cannot open the run lock .*Is a directory"):
        RunLock(tmp_path / LOCK_FILE).acquire()


def _acquire_refused(path: Path) -> str:
    with pytest.raises(RunDirError) as caught:
        RunLock(path).acquire()
    return str(caught.value)


def test_a_full_disk_at_the_run_lock_is_one_line_naming_enospc(tmp_path: Path) -> None:
    """Issue 43: a full disk failed in `os.pwrite` with a traceback. A real ENOSPC: a 16 KiB tmpfs
    filled to the last page, where creating the lock file still works (an inode) but writing
    its holder does not."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)]
    mounted = subprocess.run(mount, capture_output=True, text=True, check=False)
    if mounted.returncode:  # not root, or no CAP_SYS_ADMIN: the RLIMIT_FSIZE test below still runs
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        with contextlib.suppress(OSError), (disk / "fill").open("wb") as fill:
            fill.write(b"\0" * (1 << 20))
        message = _acquire_refused(disk / LOCK_FILE)
        (disk / "fill").unlink()
        lock = RunLock(disk / LOCK_FILE)  # the refused run held nothing: with space, the next one runs
        lock.acquire()
        lock.release()
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)  # lazy: even with a file left open
    assert message == (
        f"output_dir: cannot write the run lock {disk / LOCK_FILE}: No space left on device (ENOSPC); "
        "free space there or give another output_dir"
    )


def test_a_file_size_limit_at_the_run_lock_is_one_line_naming_efbig(tmp_path: Path) -> None:
    """The same path without root: RLIMIT_FSIZE 0 makes the holder's `os.pwrite` fail with EFBIG
    (setrlimit(2); SIGXFSZ ignored, as a shell's `ulimit -f` run would have it or die)."""
    path = tmp_path / LOCK_FILE
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
    try:
        message = _acquire_refused(path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert message == (
        f"output_dir: cannot write the run lock {path}: File too large (EFBIG); "
        "free space there or give another output_dir"
    )
