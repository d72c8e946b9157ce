"""scripts/gpu_bench.sh --dry-run end to end: the wrapper (scripts/gpu_run.sh), then
scripts/gpu_bench.py's real GSPO rollout batch on the tiny model on CPU, which must never call
CUDA: a sitecustomize on the subprocess's path makes torch.cuda's calls raise in it. The table's
figures must be the run's own `perf/*` log, not numbers of the script's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests._paths import ROOT
from tests._scripts import load_script
from tests.test_gpu_smoke import CUDA_CALLS

GUARD = f"""
import sys

if sys.argv and sys.argv[0].endswith("gpu_bench.py"):  # not the wrapper's own python checks
    import torch

    def _refuse(*args, **kwargs):
        raise AssertionError("gpu_bench --dry-run called CUDA")

    for _name in {CUDA_CALLS!r}:
        setattr(torch.cuda, _name, _refuse)
"""


@pytest.mark.slow
def test_dry_run_prints_the_runs_own_perf_window_without_cuda(tmp_path):
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD)
    out = tmp_path / "bench"
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": str(guard),
        "WHEELS": str(tmp_path / "no-wheels"),
        "GPU_RUN_NO_WHEELS": "1",
        "GSPO_TRL_CPU_THREADS": "1",
    }
    command = [str(ROOT / "scripts" / "gpu_bench.sh"), "--dry-run", "--output-dir", str(out)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    bench = json.loads((out / "gpu_bench.json").read_text())
    [row] = bench["rows"]
    events = [json.loads(line) for line in (out / "tiny-run" / "metrics.jsonl").read_text().splitlines()]
    [window] = [event for event in events if "perf/wall_s" in event]  # one rollout batch, one window
    assert row["generated_tokens_per_s_per_gpu"] == window["perf/tokens_per_s"]
    assert row["trained_tokens_per_s_per_gpu"] == window["perf/trained_tokens_per_s"]
    assert row["update_mfu"] == window["perf/mfu"]
    assert row["phase_seconds"]["update"] == window["perf/update_s"] > 0
    assert window["perf/generated_tokens"] == row["completions_per_rollout_batch"] * row["completion_tokens"]
    assert window["completions/min_length"] == window["completions/max_length"] == row["completion_tokens"]
    assert row["plan_gpu"] == "H200" and row["plan_floor_seconds_per_step"] > 0
    assert "GSPO throughput on CPU, dry run" in result.stdout
    assert "phase split, % of the window's wall time:" in result.stdout


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
