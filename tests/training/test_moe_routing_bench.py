"""scripts/bench_moe_routing.py's smallest `run` (--smoke: a 2-layer MoE, 20 SFT steps, 4 GSPO
steps, 8 held-out rows), two arms and one seed, so that the experiment script cannot rot. The
experiment itself is run by hand (its table: docs/measurements/moe_routing/)."""

from __future__ import annotations

import json
import math

import pytest

from tests._paths import ROOT
from tests._scripts import load_script

SCRIPT = ROOT / "scripts" / "bench_moe_routing.py"


@pytest.mark.slow
def test_smoke_run_writes_a_row_per_run_and_resumes_without_training(tmp_path, monkeypatch, capsys):
    bench = load_script("bench_moe_routing")
    argv = ["run", "--smoke", "--seeds", "1", "--arms", "grpo-off-4,gspo-old-4", "--output-dir"]
    argv.append(str(tmp_path))
    assert bench.main(argv) == 0
    assert len(list((tmp_path / "results").glob("*.json"))) == 2  # a raw record a run
    rows = [json.loads(line) for line in (tmp_path / "run_rows.jsonl").read_text().splitlines()]
    assert [(r["algorithm"], r["replay"], r["spg"]) for r in rows] == [("grpo", "off", 4), ("gspo", "old", 4)]
    for row in rows:
        assert row["steps"] == 4 and row["seed"] == 0
        assert 0.0 <= row["heldout_before"] <= 1.0 and 0.0 <= row["heldout_after"] <= 1.0
        # updates 2-4 are off-policy: the routers and the token log-ratios have moved
        assert 0.0 < row["flip_mean"] <= row["flip_max"] <= 1.0
        assert row["token_log_ratio_std"] > 0.0 and math.isfinite(row["seq_log_ratio_std"])
        assert row["routing_token_std"] > 0.0 and row["routing_seq_std"] > 0.0  # flips move log-probs
        assert row["grad_norm_early_median"] > 0.0 and isinstance(row["collapse"], list)
    assert (tmp_path / "run_table.md").read_text().count("| grpo off spg4") == 2  # per arm, per run
    assert "collapses" in capsys.readouterr().out

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench, "train_recipe", refuse)
    assert bench.main(argv) == 0  # every result JSON exists: nothing is trained
