"""The run lock under a race: several real processes start together on one output_dir whose lock
a dead run left behind (or left unreadable), and exactly one of them may hold it.

Each round forks RACERS processes that wait at a barrier, try `RunLock.acquire` at once, report
whether they hold it, and keep holding it until every racer has reported, so two holders would
be seen together. The old take-over (read the stale file, unlink it, link a new one) let two or
three through in some rounds: a racer unlinked the lock a faster racer had just taken.
"""

from __future__ import annotations

import json
import multiprocessing
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
