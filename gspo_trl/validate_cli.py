"""`gspo-trl validate RECIPE [--key value ...]`: every check `train` makes before loading a model.

Also loads the data (to check the columns the rewards need and every row), so a recipe
that passes here fails in `train` only for reasons that need the model or the hardware.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gspo_trl.data import load_data
from gspo_trl.recipe import RecipeError, load_recipe
from gspo_trl.train import USER_ERRORS, split_argv
from gspo_trl.validation import check_columns, validate


def main(argv: Sequence[str] | None = None) -> int:
    try:
        path, _, overrides = split_argv(list(argv or []))
        if path is None:
            raise RecipeError("no recipe given: gspo-trl validate RECIPE.yaml [--key value ...]")
        recipe = load_recipe(path, overrides)
        validate(recipe)
        train, evaluation = load_data(recipe.data)
        check_columns(recipe, train.column_names)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(
        f"{path}: ok ({recipe.algorithm}, {len(recipe.rewards)} reward(s), {len(train)} training rows"
        f"{f', {len(evaluation)} eval rows' if evaluation is not None else ''})"
    )
    return 0
