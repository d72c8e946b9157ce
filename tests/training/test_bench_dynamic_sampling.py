"""scripts/bench_dynamic_sampling.py end to end at a few steps: both modes run on the harder task,
the table and results.json hold their held-out curves, tokens and wall times."""

from __future__ import annotations

import json

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401 (fixture)
from tests._scripts import load_script


@pytest.mark.slow
def test_bench_dynamic_sampling_smoke(tmp_path, capsys):
    bench = load_script("bench_dynamic_sampling")
    argv = ["--seeds", "0", "--tasks", "long", "--steps", "4", "--every", "2", "--sft-steps", "2"]
    results = bench.main([*argv, "--rows", "64", "--heldout-rows", "8", "--out", str(tmp_path)])
    runs = results["long"]
    assert set(runs) == {"off", "on"} and all(len(r) == 1 for r in runs.values())
    for run in (runs["off"][0], runs["on"][0]):
        assert [step for step, _ in run["heldout"]] == [0, 2, 4]
        assert run["generated_tokens"] > 0 and run["wall_s"] > 0
    assert runs["on"][0]["keep_rate_mean"] is not None and runs["off"][0]["keep_rate_mean"] is None
    out = capsys.readouterr().out
    assert "| off |" in out and "| on |" in out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["results"]["long"]["on"][0]["heldout"] == runs["on"][0]["heldout"]
