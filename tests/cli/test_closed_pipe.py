"""`gspo-trl plan RECIPE | head -3`: the reader leaves early and the command stops quietly, as Unix
tools do (exit 141, a SIGPIPE death's status), with no BrokenPipeError traceback on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

from tests._paths import ROOT


def test_a_closed_stdout_ends_the_command_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line: every write meets a closed pipe
    try:
        result = subprocess.run(
            [sys.executable, "-m", "gspo_trl", "plan", "recipes/tiny/reversal.yaml"],
            cwd=ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.returncode == 141, result.stderr
