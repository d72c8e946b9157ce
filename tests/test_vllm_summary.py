"""The test summary names a skipped vLLM suite (tests/_vllm_summary.py), in a real pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec

from tests._paths import ROOT
from tests._vllm_summary import vllm_summary_line

SUITE = """
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(True, reason="vLLM is not installed: x")]


def test_engine():
    pass


def test_sync():
    pass
"""


def test_a_skipped_vllm_suite_is_one_line_of_the_summary(tmp_path):
    (tmp_path / "test_fake_vllm.py").write_text(SUITE)
    (tmp_path / "test_plain.py").write_text("def test_ok():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "tests._vllm_summary", "-p", "no:cacheprovider"]
    command += ["-m", "vllm or not vllm", "--rootdir", str(tmp_path), str(tmp_path)]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
    assert vllm_summary_line(2, find_spec("vllm") is not None) in result.stdout.splitlines()
    assert "1 passed, 2 skipped" in result.stdout
