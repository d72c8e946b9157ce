"""A CPU's peak matmul rate, kept per machine so that CPU MFU figures compare between runs.

A CPU has no datasheet peak that torch reaches, so gspo_trl.model.sizing.flops measures one: the best
float32 matmul rate in 0.2 s. Measured afresh by each process, it followed the machine's load
(0.033-0.173 TFLOPS on this project's shared 2-core machine), and so did every MFU divided by it:
a busier machine showed a *higher* MFU. Here each measurement is kept in a small JSON file, per
host, CPU model and thread count, and the peak used is the best one ever measured there: it only
rises, towards what the idle machine reaches, and two runs on one machine divide by the same
figure once an idle measurement is in the file. The file is OUTPUT-independent: `$GSPO_TRL_CACHE`,
else `$XDG_CACHE_HOME/gspo-trl`, else `~/.cache/gspo-trl`, file `cpu_peak.json`. A file that
cannot be read or written is ignored (the process's own measurement is used, and said so).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

CACHE_FILE = "cpu_peak.json"


def cache_dir() -> Path:
    """Where the per-machine figures live (see the module docstring)."""
    explicit = os.environ.get("GSPO_TRL_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gspo-trl"


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(threads: int) -> str:
    return f"{socket.gethostname()} | {cpu_model()} | {threads} thread(s)"


def _read(path: Path) -> dict:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def machine_cpu_peak(threads: int, measure: Callable[[int], float]) -> tuple[float, str]:
    """(peak TFLOPS, where it comes from): the best of this measurement and those kept for this
    machine and thread count; this one is added to the file."""
    now = measure(threads)
    path = cache_dir() / CACHE_FILE
    key = machine_key(threads)
    figures = _read(path)
    entry = figures.get(key) if isinstance(figures.get(key), dict) else {}
    best = max(now, float(entry.get("best_tflops") or 0.0))
    count = int(entry.get("measurements") or 0) + 1
    figures[key] = {"best_tflops": best, "measurements": count}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".cpu_peak-")
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except OSError:
        return now, f"measured now: {path} not writable, not comparable between runs"
    return best, f"best of {count} measured on this machine"
