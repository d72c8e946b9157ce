"""Fixtures shared across test modules."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._paths import ROOT

# The tiny model's runs (in-process and in subprocesses) take one torch thread: on 2 cores a
# second only spin-waits when another test process is busy. gspo_trl.cpu_threads reads this.
os.environ.setdefault("GSPO_TRL_CPU_THREADS", "1")


def demo_command() -> list[str]:
    """The Makefile's `demo` recipe line, with the venv's console script."""
    makefile = (ROOT / "Makefile").read_text()
    line = re.search(r"^demo:.*\n\t(.+)$", makefile, re.MULTILINE).group(1)
    words = line.replace("$(VENV)/bin/", "").split()
    assert words[:2] == ["gspo-trl", "demo"], line
    return [str(Path(sys.executable).parent / "gspo-trl"), *words[1:]]


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the demo exactly as `make demo` does, in a scratch working directory."""
    workdir = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        demo_command(), cwd=workdir, env=env, capture_output=True, text=True, timeout=1500
    )
    (workdir / "demo.log").write_text(result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "held-out exact-match accuracy after GSPO" in result.stdout
    return workdir / "runs" / "demo"


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make capsys's streams claim to be a terminal. The class is patched, not sys.stderr:
    capsys puts its stream in place only when the test body starts, after the fixtures."""
    from _pytest.capture import CaptureIO

    monkeypatch.setattr(CaptureIO, "isatty", lambda self: True)


@pytest.fixture(autouse=True)
def gspo_trl_loggers_enabled() -> None:
    """Each test starts with the package's loggers on. A library that configures logging in the
    test process (dictConfig disables every existing logger unless told otherwise) must not
    decide whether a later test's warning is recorded; the full suite's order showed it does."""
    logging.disable(logging.NOTSET)
    for name, known in logging.root.manager.loggerDict.items():
        if name.startswith("gspo_trl") and isinstance(known, logging.Logger):
            known.disabled = False
