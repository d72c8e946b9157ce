"""What must stay true of a reused sandbox's init between jobs, read from outside through /proc:
that it is the process we started (:class:`InitProcess`), and what it hands down to every
job it forks (:func:`changed`).

Why: a reused sandbox's fork server passes its resource limits, nice value, scheduling
policy, CPU affinity, I/O priority and OOM score adjustment on to every job it forks
(fork(2): the child inherits them). A job of the same uid could once change them on the
server (prlimit(2) lets a process set another's limits when the caller's real uid matches
the target's real, effective and saved uids and likewise for gids; setpriority(2) and
sched_setscheduler(2) let it renice or reschedule a process of its own uid): RLIMIT_FSIZE 1
made every later job fail before it ran, RLIMIT_DATA 60 MB failed only memory-heavy honest
solutions, and nice 19 or ``SCHED_IDLE`` turned later jobs into timeouts under a cpu cgroup.
The seccomp filter now refuses those calls (``_seccomp``); this is the second line: the
server must carry exactly what bwrap, its parent outside the sandbox (which no job can name,
being outside the job's pid namespace), carries, or it is retired (``servers``).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}
_IOPRIO_WHO_PROCESS = 1


def settings(pid: int) -> dict[str, str] | None:
    """What ``pid`` passes on to its children, as comparable strings; None once it is gone.

    ``stat`` fields (proc(5)): 19 nice, 40 rt_priority, 41 policy.
    """
    try:
        with open(f"/proc/{pid}/limits") as f:
            limits = f.read()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # fields[0] is field 3, state
        with open(f"/proc/{pid}/status") as f:
            affinity = next((line for line in f if line.startswith("Cpus_allowed_list:")), "")
        with open(f"/proc/{pid}/oom_score_adj") as f:
            oom = f.read()
    except (OSError, IndexError):
        return None
    return {
        "limits": limits,
        "nice": fields[16],
        "rt_priority": fields[37],
        "policy": fields[38],
        "affinity": affinity.split(":", 1)[-1].strip(),
        "io_priority": str(_io_priority(pid)),
        "oom_score_adj": oom.strip(),
    }


def _io_priority(pid: int) -> int | None:
    """ioprio_get(2) of ``pid`` (no /proc file shows it); None where unknown."""
    number = _IOPRIO_GET.get(os.uname().machine)
    if number is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    value = libc.syscall(ctypes.c_long(number), ctypes.c_long(_IOPRIO_WHO_PROCESS), ctypes.c_long(pid))
    return None if value < 0 else value


def changed(parent: int, child: int) -> str | None:
    """What ``child`` no longer shares with ``parent`` (names and both values), or None."""
    before, after = settings(parent), settings(child)
    if before is None or after is None:
        return "cannot read its settings (gone?)"
    diffs = [name for name in before if before[name] != after[name]]
    if not diffs:
        return None
    if "limits" in diffs:
        old, new = before["limits"].splitlines(), after["limits"].splitlines()
        lowered = [" ".join(n.split()) for o, n in zip(old, new, strict=False) if o != n]
        return f"its resource limits changed (now: {'; '.join(lowered)})"
    return "its " + ", ".join(f"{n} changed ({before[n]} -> {after[n]})" for n in diffs)


@dataclass(frozen=True)
class InitProcess:
    """What identifies a sandbox's init from outside: its host pid, start time and command
    line, with what must stay true of it between jobs."""

    pid: int
    start: str
    cmdline: bytes
    owner: int  # /proc/<pid>/status's owner: root while non-dumpable, the uid once dumpable
    tracer: str
    state: str
    threads: int
    children: str

    @classmethod
    def of(cls, bwrap_pid: int) -> InitProcess | None:
        """bwrap's only child is the sandbox's init (``--as-pid-1``)."""
        try:
            with open(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children") as f:
                kids = f.read().split()
            if len(kids) != 1:
                return None
            pid = int(kids[0])
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
                owner = os.fstat(f.fileno()).st_uid
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            tasks = os.listdir(f"/proc/{pid}/task")
            children = ""
            for tid in tasks:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    children += f.read()
        except (OSError, ValueError):
            return None
        return cls(
            pid,
            fields[19],
            cmdline,
            owner,
            status["TracerPid"].strip(),
            fields[0],
            len(tasks),
            children.strip(),
        )

    def differs(self, now: InitProcess, sandbox_uid: int) -> str | None:
        if (now.pid, now.start) != (self.pid, self.start):
            return "its init is not the process it started with"
        if now.owner == sandbox_uid:
            return "its init became dumpable (an execve?)"
        if now.tracer != "0" or now.state in ("T", "t"):
            return f"its init is traced or stopped (tracer {now.tracer}, state {now.state})"
        if now.threads != 1 or now.children:
            return f"processes outlived the job (init threads {now.threads}, children {now.children!r})"
        return None
