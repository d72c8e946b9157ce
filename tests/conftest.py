"""Fixtures shared across test modules."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tests._demo_run import run_demo
from tests._shared_fixtures import pytest_fixture_setup  # noqa: F401 - the hook: a failed shared fixture once
from tests._vllm_summary import pytest_terminal_summary  # noqa: F401 - the hook: vLLM skips named

# The tiny model's runs (in-process and in subprocesses) take one torch thread: on 2 cores a
# second only spin-waits when another test process is busy. gspo_trl.core.cpu_threads reads this.
os.environ.setdefault("GSPO_TRL_CPU_THREADS", "1")


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the demo exactly as `make demo` does, once, in a scratch working directory."""
    return run_demo(tmp_path_factory.mktemp("demo"))


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
