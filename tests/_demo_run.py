"""The suite's one run of `make demo` (conftest.py's session fixture `demo_run` calls run_demo).

Seventeen tests read its output (tests/cli/test_demo.py, the README commands, test_evaluate).
It has a limit of its own, DEMO_TIMEOUT_S, below the pytest timeout of every test that may be
the first to need it (their markers add their own time to it), so that a demo slowed by a busy
machine fails with the demo's own message, once, instead of a pytest-timeout in the middle of
whichever test came first.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._paths import ROOT

DEMO_TIMEOUT_S = 1500
"""The demo's own limit, seconds: ~10x its time on 2 idle cores (under 3 min, scripts/time_demo.sh)."""

RESULT_LINE = "held-out exact-match accuracy after GSPO"


def demo_command() -> list[str]:
    """The Makefile's `demo` recipe line, with the venv's console script."""
    makefile = (ROOT / "Makefile").read_text()
    line = re.search(r"^demo:.*\n\t(.+)$", makefile, re.MULTILINE).group(1)
    words = line.replace("$(VENV)/bin/", "").split()
    assert words[:2] == ["gspo-trl", "demo"], line
    return [str(Path(sys.executable).parent / "gspo-trl"), *words[1:]]


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_demo(workdir: Path) -> Path:
    """Run the demo as `make demo` does, from `workdir`; its stdout then stderr go to
    workdir/demo.log. Returns runs/demo; fails once, with the log's tail, when it fails."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    out, err = workdir / "demo.stdout", workdir / "demo.stderr"
    started = time.monotonic()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            demo_command(), cwd=workdir, env=env, stdout=stdout, stderr=stderr, start_new_session=True
        )
        try:
            status = process.wait(timeout=DEMO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            status = None
        finally:  # past its limit, or the wait interrupted (pytest-timeout, Ctrl-C): no orphan
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    seconds = time.monotonic() - started
    printed = out.read_text(errors="replace")
    log = printed + err.read_text(errors="replace")
    (workdir / "demo.log").write_text(log)
    if status is None:
        pytest.fail(
            f"the demo run (demo_run fixture) was stopped after {seconds:.0f} s "
            f"(its limit: DEMO_TIMEOUT_S = {DEMO_TIMEOUT_S} s, tests/_demo_run.py); "
            f"log {workdir / 'demo.log'}, last lines:\n{_tail(log)}",
            pytrace=False,
        )
    if status != 0 or RESULT_LINE not in printed:
        pytest.fail(
            f"the demo run (demo_run fixture) exited {status} after {seconds:.0f} s"
            f"{'' if status else f' without printing {RESULT_LINE!r}'}; "
            f"log {workdir / 'demo.log'}, last lines:\n{_tail(log)}",
            pytrace=False,
        )
    return workdir / "runs" / "demo"
