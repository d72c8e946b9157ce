"""How many threads torch gets on a CPU run: the cores that are free now, not every core.

torch starts one intra-op thread per core. When another process already keeps a core busy,
those threads take turns with it and wait on each other at every parallel region: on a 2-core
machine with one busy process the demo's warm start crawled at ~6 s per step, half of the CPU
time in the kernel; with one thread it ran at its usual pace. So a CPU run samples how busy the
machine is for a moment (/proc/stat) and asks for the cores that were idle, shared among the
local processes of a launch. A user's OMP_NUM_THREADS or GSPO_TRL_CPU_THREADS is left alone.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

SAMPLE_SECONDS = 0.3
OVERRIDE = "GSPO_TRL_CPU_THREADS"
_sized_to: int | None = None  # the thread count this process's last sizing chose


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _cpu_times() -> tuple[int, int] | None:
    """(idle, total) jiffies over all CPUs from /proc/stat; None where there is none."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return idle, sum(fields[:8])


def free_cores(sample_seconds: float = SAMPLE_SECONDS) -> float:
    """Cores left idle by everything else during a short sample (all of them if unknown)."""
    cores = usable_cores()
    before = _cpu_times()
    if before is None:
        return float(cores)
    time.sleep(sample_seconds)
    after = _cpu_times()
    total = after[1] - before[1] if after else 0
    if total <= 0:
        return float(cores)
    machine = os.cpu_count() or cores
    idle_fraction = (after[0] - before[0]) / total
    return min(float(cores), idle_fraction * machine)


def threads_for(free: float, local_processes: int = 1) -> int:
    """Threads per process: the free cores shared among the launch's processes, at least 1.

    A core counts as free when at least ~60% of it was idle (a half-busy core still costs a
    thread its turn at every parallel region)."""
    return max(1, math.floor(free / max(1, local_processes) + 0.4))


def size_torch_threads(local_processes: int = 1) -> str:
    """Set torch's intra-op threads for a CPU run; returns a short line saying what and why."""
    global _sized_to
    line = _size(local_processes)
    import torch

    _sized_to = torch.get_num_threads()
    return line


def resize_torch_threads(local_processes: int = 1) -> str | None:
    """Size the threads again for a later stage of the same process (the load may have changed);
    the line only when the count differs from the earlier sizing's, else None. The demo sizes
    before its warm start, and its GSPO stage would otherwise print the same line a second time."""
    before = _sized_to
    line = size_torch_threads(local_processes)
    return None if before == _sized_to else line


def _size(local_processes: int) -> str:
    import torch

    for variable in (OVERRIDE, "OMP_NUM_THREADS"):
        if os.environ.get(variable, "").strip():
            if variable == OVERRIDE:
                torch.set_num_threads(max(1, int(os.environ[variable])))
            return f"CPU threads: {torch.get_num_threads()} ({variable}={os.environ[variable]})"
    free = free_cores()
    threads = threads_for(free, local_processes)
    torch.set_num_threads(threads)
    share = f" shared by {local_processes} processes" if local_processes > 1 else ""
    return (
        f"CPU threads: {threads} ({free:.1f} of {usable_cores()} cores free{share}; set {OVERRIDE} to choose)"
    )
