"""GSPOConfig carries the `diagnostics`, `engine` and `moe` sections as their dataclasses, built
and checked once, with a recipe user's checks and messages, whether a Python user passes the
dataclass or a dict; `to_dict()` writes them as dicts (JSON, trackers)."""

from __future__ import annotations

import json

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections import DiagnosticsConfig, EngineConfig, MoeConfig, SamplingConfig
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.config import GSPOConfig

TINY_RECIPE = "recipes/tiny/reversal.yaml"
BASE = {"use_cpu": True, "bf16": False, "report_to": "none"}

BAD_SECTIONS = [
    # (section, bad fields, the phrase a recipe user is told)
    ("engine", {"old_logprobs": "vllm"}, "engine.old_logprobs must be one of trainer, engine"),
    ("engine", {"max_bias_fraction": 2.0}, "engine.max_bias_fraction must be in (0, 1]"),
    ("moe", {"routing_replay": "sometimes"}, "moe.routing_replay must be one of off, old, engine"),
    ("diagnostics", {"warn_flip_rate": 0.0}, "diagnostics.warn_flip_rate must be in (0, 1]"),
    ("diagnostics", {"length_buckets": [8, 4]}, "diagnostics.length_buckets must be strictly increasing"),
    ("engine", {"old_logprob": "engine"}, "engine.old_logprob"),  # a misspelt key
    ("sampling", {"dynamic": True, "max_rounds": 0}, "sampling.max_rounds must be a whole number"),
    ("sampling", {"warn_capped_batches": 0}, "sampling.warn_capped_batches must be >= 1"),
]


@pytest.mark.parametrize(("section", "fields", "phrase"), BAD_SECTIONS)
def test_a_bad_section_is_refused_alike_in_a_recipe_a_dict_and_a_dataclass(tmp_path, section, fields, phrase):
    recipe = load_recipe(TINY_RECIPE, {section: fields}, partial=True)
    with pytest.raises(RecipeError) as from_recipe:
        validate(recipe, processes=1)
    with pytest.raises(RecipeError) as from_dict:
        GSPOConfig(output_dir=str(tmp_path), **BASE, **{section: fields})
    assert phrase in str(from_recipe.value) and phrase in str(from_dict.value)
    assert len(str(from_dict.value).splitlines()) == 1
    assert str(from_dict.value) in str(from_recipe.value)  # the recipe's line adds only the file
    kinds = {"engine": EngineConfig, "moe": MoeConfig, "diagnostics": DiagnosticsConfig}
    kind = {**kinds, "sampling": SamplingConfig}[section]
    if set(fields) <= {f for f in kind.__dataclass_fields__}:
        with pytest.raises(RecipeError, match=phrase.replace("(", r"\(").replace("]", r"\]")):
            kind(**fields)  # the dataclass itself refuses, with the same words


def test_sections_are_typed_once_and_serialised_as_dicts(tmp_path):
    engine = EngineConfig(on_mismatch="stop")
    config = GSPOConfig(
        output_dir=str(tmp_path),
        **BASE,
        engine=engine,
        moe={"routing_replay": "old"},
        diagnostics={"length_buckets": [4, 8]},
    )
    assert config.engine is engine
    assert config.moe == MoeConfig(routing_replay="old")
    assert config.diagnostics == DiagnosticsConfig(length_buckets=(4, 8))
    assert GSPOConfig(output_dir=str(tmp_path), **BASE).engine == EngineConfig()  # None: the defaults
    saved = json.loads(config.to_json_string())
    assert saved["engine"]["on_mismatch"] == "stop" and saved["moe"] == {"routing_replay": "old"}
    assert saved["diagnostics"]["length_buckets"] == [4, 8]
    again = GSPOConfig(**{k: saved[k] for k in ("output_dir", "engine", "moe", "diagnostics")}, **BASE)
    assert (again.engine, again.moe, again.diagnostics) == (config.engine, config.moe, config.diagnostics)


def test_a_recipe_holds_its_sections_typed():
    recipe = load_recipe(TINY_RECIPE, {"moe": {"routing_replay": "old"}})
    assert recipe.moe == MoeConfig(routing_replay="old")
    assert recipe.engine == EngineConfig()
    assert recipe.diagnostics == DiagnosticsConfig(length_buckets=(6, 8))  # the recipe's own buckets


def test_cross_section_checks_are_the_recipes(tmp_path):
    message = "moe.routing_replay: old records the experts in the trainer's pi_old forward"
    with pytest.raises(RecipeError, match=message):
        GSPOConfig(
            output_dir=str(tmp_path),
            **BASE,
            use_vllm=True,
            engine=EngineConfig(old_logprobs="engine"),
            moe=MoeConfig(routing_replay="old"),
        )
