"""`engine.correction` keys: off by default, each refusal one line naming the keys, from a recipe and
from GSPOConfig alike (gspo_trl.config.sections.engine_correction)."""

from __future__ import annotations

import json

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections import EngineConfig
from gspo_trl.config.sections.engine_correction import CALIBRATION_KEY, read_calibration
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.config import GSPOConfig

RECIPE = "recipes/tiny/reversal.yaml"
VLLM = {"use_vllm": "true"}

REFUSALS = {
    # name: (overrides, phrase the one-line error must contain)
    "unknown mode": (
        {"engine.correction": "clip", **VLLM},
        "engine.correction must be one of off, truncate, reject",
    ),
    "both corrections": (
        {"engine.correction": "truncate", "vllm_importance_sampling_correction": "true", **VLLM},
        "engine.correction: truncate and vllm_importance_sampling_correction: true both reweight",
    ),
    "no engine": ({"engine.correction": "reject"}, "set use_vllm: true or engine.correction: off"),
    "engine mode without token rule": (
        {"engine.correction": "reject", "engine.old_logprobs": "engine", **VLLM},
        "with old_logprobs: engine does nothing",
    ),
    "negative bound": (
        {"engine.correction": "reject", "engine.reject_k3": "-1", **VLLM},
        "engine.reject_k3 must",
    ),
    "bounds around 1": (
        {"engine.correction": "reject", "engine.weight_min": "1.2", "engine.weight_max": "2", **VLLM},
        "engine.weight_min (1.2) must be below 1",
    ),
    "not a threshold": ({"engine.weight_max": "high"}, "engine.weight_max"),
    "missing report": (
        {"engine.correction": "truncate", "engine.thresholds_from": "/nonexistent/report.json", **VLLM},
        "engine.thresholds_from: cannot read /nonexistent/report.json",
    ),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_recipe_refusals_name_the_keys(name):
    overrides, phrase = REFUSALS[name]
    with pytest.raises(RecipeError) as error:
        validate(load_recipe(RECIPE, overrides, partial=True))
    lines = getattr(error.value, "lines", [error.value])
    assert len(lines) == 1 and phrase in str(lines[0]) and "\n" not in str(lines[0])


def test_off_by_default_and_the_accepted_combinations_validate():
    assert EngineConfig().correction == "off" and not EngineConfig().corrects
    validate(load_recipe(RECIPE, {"engine.correction": "truncate", **VLLM}))
    validate(load_recipe(RECIPE, {"engine.correction": "reject", "engine.reject_k3": "auto", **VLLM}))
    engine_mode = {
        "engine.old_logprobs": "engine",
        "engine.correction": "reject",
        "engine.reject_max_token": "0.5",
    }
    validate(load_recipe(RECIPE, {**engine_mode, **VLLM}))


def test_gspo_config_refuses_the_same(tmp_path):
    base = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", use_vllm=True)
    with pytest.raises(RecipeError, match="both reweight"):
        GSPOConfig(**base, engine={"correction": "truncate"}, vllm_importance_sampling_correction=True)
    config = GSPOConfig(**base, engine={"correction": "reject", "weight_max": 1.5, "weight_min": "auto"})
    assert config.engine.weight_max == 1.5 and config.engine.weight_min == "auto"


def test_thresholds_from_a_check_logprobs_report(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"safe": True}))
    with pytest.raises(RecipeError, match=f"has no '{CALIBRATION_KEY}' section"):
        read_calibration(report)
    report.write_text(json.dumps({CALIBRATION_KEY: {"log_weight_abs": 1e-3, "max_token": 0.1, "k3": 1e-5}}))
    assert read_calibration(report)["max_token"] == 0.1
