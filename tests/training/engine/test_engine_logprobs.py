"""`engine.old_logprobs: engine` without an engine: the guard's verdicts (table-driven), the recipe
section and its refusals. The real vLLM runs are in test_engine_logprobs_vllm.py."""

from __future__ import annotations

import math
import re

import pytest
import torch

from gspo_trl.cli.check_logprobs import build_parser as check_logprobs_parser
from gspo_trl.config.recipe import load_recipe, recipe_as_yaml
from gspo_trl.config.sections import MAX_BIAS_FRACTION, MAX_OUTSIDE_CLIP, EngineConfig
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from gspo_trl.diagnose.check_logprobs import LogprobPairs, agreement_report
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.engine.mismatch import EngineMismatchGuard, judge_mismatch
from tests._paths import ROOT

EPS_LOW, EPS_HIGH = 3e-4, 4e-4
NARROW = -math.log1p(-EPS_LOW)  # the narrower half-range in log space, ~3.0e-4

GUARD_CASES = {
    # name: (log s_i per response, flagged, outside_clip)
    "matched fp32 engine": ([1e-7, -1e-7, 5e-8, 0.0], False, 0.0),
    "bias just under a quarter of the range": ([0.24 * NARROW] * 4, False, 0.0),
    "bias just over a quarter of the range": ([0.26 * NARROW] * 4, True, 0.0),
    "negative bias, all outside": ([-1e-3] * 4, True, 1.0),
    "zero mean, wide spread": ([1e-3, -1e-3, 1e-3, -1e-3], True, 1.0),
    "one response of 40 outside (2.5% <= 5%)": ([0.0] * 39 + [1e-3], False, 0.025),
    "missing responses (NaN padding from a gather) are skipped": ([0.0, math.nan, 0.0], False, 0.0),
}


@pytest.mark.parametrize("name", GUARD_CASES)
def test_guard_verdicts(name):
    log_s, flagged, outside = GUARD_CASES[name]
    verdict = judge_mismatch(torch.tensor(log_s), EPS_LOW, EPS_HIGH)  # the shared default limits
    assert (verdict.problem is not None) is flagged, verdict
    assert verdict.outside_clip == pytest.approx(outside)
    assert verdict.responses == sum(1 for x in log_s if x == x)
    assert set(verdict.metrics()) == {
        "gspo/engine_mismatch/mean",
        "gspo/engine_mismatch/std",
        "gspo/engine_mismatch/outside_clip",
    }


@pytest.mark.parametrize("name", [n for n in GUARD_CASES if "NaN" not in n])
def test_check_logprobs_gives_the_guards_verdict(name):
    """The same per-response log s_i, as check-logprobs measures it (one token per response):
    SAFE exactly when the run's guard would not flag it."""
    log_s, flagged, outside = GUARD_CASES[name]
    engine = [torch.tensor([-1.0], dtype=torch.float64) for _ in log_s]
    pairs = LogprobPairs(
        engine, [e + x for e, x in zip(engine, log_s, strict=True)], [[0]] * len(log_s), [[0]] * len(log_s)
    )
    report = agreement_report(pairs, EPS_LOW, EPS_HIGH)
    assert report["safe"] is not flagged and report["outside_clip"] == pytest.approx(outside)
    assert report["max_outside_clip"] == EngineConfig().max_outside_clip


def test_guard_pools_micro_batches_and_judges_once_per_rollout_batch():
    guard = EngineMismatchGuard(EngineConfig(old_logprobs="engine").old_logprobs_settings())
    assert guard.finish(EPS_LOW, EPS_HIGH) is None
    guard.observe(torch.tensor([1e-3, 1e-3]))
    guard.observe(torch.tensor([-1e-3, -1e-3]))
    verdict = guard.finish(EPS_LOW, EPS_HIGH)
    assert verdict.responses == 4 and verdict.mean == pytest.approx(0.0) and verdict.outside_clip == 1.0
    assert guard.finish(EPS_LOW, EPS_HIGH) is None and guard.flagged_batches == 1


REFUSALS = {
    # name: (overrides, phrase the error must contain)
    "unknown source": (
        {"engine.old_logprobs": "cache"},
        "engine.old_logprobs must be one of trainer, engine",
    ),
    "unknown action": ({"engine.on_mismatch": "ignore"}, "engine.on_mismatch must be one of"),
    "bad threshold": ({"engine.max_bias_fraction": "0"}, "engine.max_bias_fraction"),
    "unknown key": ({"engine.old_logps": "engine"}, "old_logps"),
    "no vLLM": ({"engine.old_logprobs": "engine"}, "set use_vllm: true"),
    "top_p": ({"engine.old_logprobs": "engine", "use_vllm": "true", "top_p": "0.9"}, "top_p=0.9"),
    "top_k": ({"engine.old_logprobs": "engine", "use_vllm": "true", "top_k": "20"}, "top_k=20"),
    "min_p via generation_kwargs": (
        {"engine.old_logprobs": "engine", "use_vllm": "true", "generation_kwargs": {"min_p": 0.1}},
        "min_p=0.1",
    ),
    "repetition_penalty": (
        {"engine.old_logprobs": "engine", "use_vllm": "true", "repetition_penalty": "1.1"},
        "repetition_penalty=1.1",
    ),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_recipe_refusals_name_the_key(name):
    overrides, phrase = REFUSALS[name]
    with pytest.raises(RecipeError, match="engine") as error:
        validate(load_recipe("recipes/tiny/reversal.yaml", overrides))
    assert phrase in str(error.value)


def test_engine_section_loads_validates_and_round_trips(tmp_path):
    overrides = {"engine.old_logprobs": "engine", "engine.on_mismatch": "stop", "use_vllm": "true"}
    recipe = load_recipe("recipes/tiny/reversal.yaml", overrides)
    validate(recipe)
    assert recipe.engine == EngineConfig(old_logprobs="engine", on_mismatch="stop")
    path = tmp_path / "recipe.yaml"
    path.write_text(recipe_as_yaml(recipe))
    assert load_recipe(path).engine == recipe.engine
    assert load_recipe("recipes/tiny/reversal.yaml").engine == EngineConfig()  # default: trainer


def test_gspo_config_carries_and_checks_the_engine_section(tmp_path):
    config = GSPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    assert config.engine == EngineConfig()
    with pytest.raises(RecipeError, match=r"top_p=0\.95"):
        GSPOConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            bf16=False,
            use_vllm=True,
            top_p=0.95,
            engine={"old_logprobs": "engine"},
        )


@pytest.mark.parametrize("offset, key", [(0.0, "old_logprobs: engine"), (1e-3, "old_logprobs: trainer")])
def test_check_logprobs_verdict_line_names_the_recipe_key(offset, key):
    from gspo_trl.diagnose.check_logprobs import LogprobPairs, agreement_report, format_report

    engine = [torch.full((4,), -1.0, dtype=torch.float64)] * 4
    pairs = LogprobPairs(engine, [e + offset for e in engine], [[0] * 4] * 4, [[0]] * 4)
    verdict = next(
        line
        for line in format_report(agreement_report(pairs, EPS_LOW, EPS_HIGH)).splitlines()
        if "SAFE:" in line
    )
    assert key in verdict and verdict.startswith("SAFE" if offset == 0 else "UNSAFE")


def test_docs_state_the_verdict_limits_the_code_uses():
    """The guard's and check-logprobs' one set of limits, as docs/engine-logprobs.md and
    docs/vllm.md state them (recipe-reference.md is generated from EngineConfig itself)."""
    engine_doc = (ROOT / "docs" / "engine-logprobs.md").read_text(encoding="utf-8")
    vllm_doc = (ROOT / "docs" / "vllm.md").read_text(encoding="utf-8")
    stated = {
        "engine-logprobs.md max_bias_fraction": float(
            re.search(r"max_bias_fraction: ([\d.]+)", engine_doc)[1]
        ),
        "engine-logprobs.md max_outside_clip": float(re.search(r"max_outside_clip: ([\d.]+)", engine_doc)[1]),
        "engine-logprobs.md bias comment": int(
            re.search(r"flag \|mean log s_i\| above (\d+)%", engine_doc)[1]
        )
        / 100,
        "engine-logprobs.md outside comment": int(
            re.search(r"flag more than (\d+)% of responses", engine_doc)[1]
        )
        / 100,
        "vllm.md --max-bias-fraction": int(re.search(r"`--max-bias-fraction` \((\d+)%\)", vllm_doc)[1]) / 100,
        "vllm.md --max-outside-clip": int(re.search(r"`--max-outside-clip` \((\d+)%\)", vllm_doc)[1]) / 100,
        "why: outside share": int(re.search(r"so (\d+)% outside costs", engine_doc)[1]) / 100,
    }
    limits = {"bias": MAX_BIAS_FRACTION, "outside": MAX_OUTSIDE_CLIP}
    for where, value in stated.items():
        assert value == (limits["bias"] if "bias" in where else limits["outside"]), where
    nats = float(re.search(r"\(([\d.e-]+) nats for the paper's 3e-4\)", engine_doc)[1])
    assert nats == pytest.approx(MAX_BIAS_FRACTION * 3e-4)
    assert check_logprobs_parser().parse_args(["r.yaml"]).max_outside_clip == MAX_OUTSIDE_CLIP
    assert check_logprobs_parser().parse_args(["r.yaml"]).max_bias_fraction == MAX_BIAS_FRACTION
