"""One line at the end of a test run saying how many vLLM tests were skipped and why: without it
a machine whose install left vLLM out (a GPU box before `make test` installed `.[vllm]`) passes
with the whole vLLM suite silently skipped among the other skips."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

import pytest


def is_vllm_skip(report: Any) -> bool:
    """A skipped test marked `vllm`, or skipped because vLLM is not installed."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return "vllm" in report.keywords or "vLLM is not installed" in reason


def vllm_summary_line(skipped: int, vllm_installed: bool) -> str:
    why = "vllm not installed" if not vllm_installed else "vllm installed; see the skip reasons above"
    return f"vLLM tests: {skipped} skipped ({why})"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = sum(is_vllm_skip(report) for report in terminalreporter.stats.get("skipped", []))
    if skipped:
        terminalreporter.write_line(vllm_summary_line(skipped, find_spec("vllm") is not None))
