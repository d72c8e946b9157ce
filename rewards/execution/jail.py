"""What every sandbox shares: its limits, the bwrap command line, and the in-sandbox code.

The lowest module of :mod:`rewards.execution` but :mod:`~rewards.execution.identity`: the
fresh-sandbox path (``sandbox``) and the reused-server path (``servers``) both build their
sandboxes from here, so neither imports the other's internals.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewards.execution import identity as ident

IN_SANDBOX_FILES = ("_harness.py", "_server.py", "_pump.py")
IN_SANDBOX_DIR = "/opt/gspo"


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


def as_user(uid: int | None) -> dict[str, Any]:
    """``subprocess.Popen`` keyword arguments that start a process as ``uid`` (None: as us)."""
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def bwrap_prefix(python: str, tmpfs_mb: int) -> list[str]:
    """bwrap's command line up to the program: namespaces, read-only system, a private /tmp."""
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for root in ident.python_roots(python):
        argv += ["--ro-bind", root, root]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(tmpfs_mb << 20), "--tmpfs", "/tmp"]
    return [*argv, "--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin:/bin"]


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
