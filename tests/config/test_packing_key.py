"""`packing:` as a recipe key: read, written back, refused in one line when not a bool, carried into
GSPOConfig, where it adds the PackingProbe (off by default)."""

from __future__ import annotations

import pytest

from gspo_trl.config.recipe import load_recipe, recipe_as_yaml
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.build import gspo_config
from gspo_trl.training.probes.packing import PackingProbe
from gspo_trl.training.trainer import builtin_probes

RECIPE = "gspo_trl/recipes/tiny/reversal.yaml"


@pytest.mark.parametrize(("overrides", "packing"), [([], False), (["--packing", "true"], True)])
def test_the_key_reaches_the_config_and_the_probe_list(overrides, packing):
    recipe = load_recipe(RECIPE, overrides)
    assert recipe.packing is packing
    assert ("packing: true" in recipe_as_yaml(recipe)) is packing
    args = gspo_config(recipe)
    assert args.packing is packing
    assert any(isinstance(p, PackingProbe) for p in builtin_probes(args)) is packing


def test_a_value_that_is_not_a_bool_is_refused_naming_the_key():
    with pytest.raises(RecipeError, match="packing: expected bool, got 'maybe'"):
        load_recipe(RECIPE, ["--packing", "maybe"])
