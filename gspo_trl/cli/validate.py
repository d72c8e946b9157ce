"""`gspo-trl validate RECIPE [--key value ...]`: every check `train` makes before loading a model.

It runs the very function `train` runs first (gspo_trl.training.preflight): recipe keys and
GSPO settings, rewards and their parameters, the data with every row and the columns the
rewards read, the held-out split, the output directory. A recipe that passes here fails in
`train` only for reasons that need the model or the hardware.
"""

from __future__ import annotations

from collections.abc import Sequence

from gspo_trl.cli.recipe_args import pop_flag, split_argv
from gspo_trl.core.errors import RecipeError

USAGE = "gspo-trl validate RECIPE.yaml [--key value ...]"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(argv or [])
    if args and args[0] in ("-h", "--help"):
        print(f"usage: {USAGE}\n\n{__doc__}")
        return 0
    pop_flag(args, "--overwrite")  # train's launch switches (like --resume) do not change the recipe
    path, _, overrides = split_argv(args)
    if path is None:
        raise RecipeError(f"no recipe given: {USAGE}")
    from gspo_trl.config.recipe import load_recipe

    recipe = load_recipe(path, overrides, partial=True)  # preflight reports its problems with its own
    from gspo_trl.training.preflight import preflight

    data = preflight(recipe, model_cached=False)
    evaluation = f", {len(data.eval)} eval rows" if data.eval is not None else ""
    rows = f"{len(data.train)} training rows{evaluation}"
    print(f"{path}: ok ({recipe.algorithm}, {len(recipe.rewards)} reward(s), {rows})")
    from gspo_trl.plan.recipe_plan import launch_hardware_warning

    warning = launch_hardware_warning(recipe)  # after preflight: invalid recipes stay fast
    if warning:
        print(warning)
    from gspo_trl.config.sections import TINY
    from gspo_trl.core.errors import UserError
    from gspo_trl.model.loading.hub import check_cached_when_offline

    if recipe.model.name_or_path != TINY:
        try:
            check_cached_when_offline(recipe.model.name_or_path, recipe.model.revision)
        except UserError as missing:  # the recipe is fine; `train` would stop here
            print(f"note: train will refuse this until the model is there: {missing}")
    return 0
