"""scripts/gpu_bench.sh: the wrapper (scripts/gpu_run.sh) runs scripts/gpu_bench.py, whose models
are the shipped architectures and whose saved bf16 weights load. Its --dry-run end to end (a real
GSPO rollout batch on CPU that never calls CUDA, the table's figures the run's own `perf/*` log)
is the bench part of scripts/gpu_check.sh --dry-run (tests/test_gpu_check.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests._paths import ROOT
from tests._scripts import load_script


def test_the_wrapper_runs_the_bench_script(tmp_path):
    """scripts/gpu_bench.sh is scripts/gpu_run.sh then scripts/gpu_bench.py with the user's words.
    The bench's real dry run (a GSPO rollout batch on CPU, no CUDA call, its table the run's own
    `perf/*` figures) is the bench part of tests/test_gpu_check.py's dry run: one run for both."""
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no-wheels")}
    command = [str(ROOT / "scripts" / "gpu_bench.sh"), "--help"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "--rollout-batches" in result.stdout and "gpu_bench.py" in result.stdout, result.stdout


def test_bench_models_are_the_shipped_architectures_in_full():
    """The random models have every parameter the plan counts for the hub checkpoints (built on
    the meta device: no memory, no time)."""
    from gspo_trl.model.tiny.dense import build_tiny_model, default_corpus, train_tokenizer
    from gspo_trl.plan import load_model_shape

    bench = load_script("gpu_bench")
    tokenizer = train_tokenizer(default_corpus())
    for model in bench.MODELS:
        with torch.device("meta"):
            built = build_tiny_model(tokenizer, bench.model_spec(model))
        shape = load_model_shape(model)
        assert sum(p.numel() for p in built.parameters()) == shape.total_params, model
        assert built.config.vocab_size == shape.vocab_size, model


def test_without_cuda_and_without_dry_run_it_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    bench = load_script("gpu_bench")
    assert bench.main(["--output-dir", str(tmp_path / "bench")]) == 2
    assert capsys.readouterr().err == "gpu_bench: no CUDA GPU here; use --dry-run on CPU\n"
    assert not (tmp_path / "bench").exists()


def test_a_window_with_a_short_completion_or_a_missing_window_refuses_the_table():
    bench = load_script("gpu_bench")
    full = {"completions/min_length": 8.0, "completions/max_length": 8.0}
    bench.check_windows([{"step": 4, **full}, {"step": 8, **full}], 2, 4, 8)
    short = {"step": 8, "completions/min_length": 7.5, "completions/max_length": 8.0}
    with pytest.raises(bench.BenchError, match=r"step 8: completions 7\.5-8\.0 tokens, not all 8"):
        bench.check_windows([{"step": 4, **full}, short], 2, 4, 8)
    with pytest.raises(bench.BenchError, match=r"end at steps \[8\], expected \[4, 8\]"):
        bench.check_windows([{"step": 8, **full}], 2, 4, 8)


def test_random_models_are_saved_in_bf16_and_load_back_at_the_recipes_dtype(tmp_path):
    """Half the bytes of float32 to write and read (main saved float32: the bench's 1.7B model
    was 6.9 GB each way); the run still gets float32 weights, exactly the saved values."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from gspo_trl.model.tiny.dense import TinyModelSpec

    common = load_script("gpu_common")
    path = common.build_model(tmp_path, "tiny", TinyModelSpec(), dry_run=True)
    with safe_open(str(path / "model.safetensors"), "pt") as weights:
        saved = {name: weights.get_tensor(name) for name in weights.keys()}  # noqa: SIM118
    assert {t.dtype for t in saved.values()} == {torch.bfloat16}
    loaded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    name, tensor = next(iter(saved.items()))
    assert torch.equal(loaded.state_dict()[name], tensor.float())
