"""Entry point: `accelerate launch -m gspo_trl.train --config RECIPE.yaml [--resume] [--key value ...]`.

The same command as `gspo-trl train RECIPE.yaml`: argv -> recipe -> `gspo_trl.training.run`
(preflight checks, GSPOConfig, GSPOTrainer, train, save). Bad input ends in one line on stderr
and exit status 2, through the CLI's single error handler.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gspo_trl.cli.recipe_args import split_argv
from gspo_trl.errors import RecipeError

USAGE = "gspo-trl train RECIPE.yaml [--resume] [--key value ...]  (or --config RECIPE.yaml)"


def main(argv: Sequence[str] | None = None) -> int:
    """Train a recipe (raises a UserError for bad input; the CLI reports it)."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import run

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: {USAGE}\n\n{__doc__}")
        return 0
    path, resume, overrides = split_argv(argv)
    if path is None:
        raise RecipeError(f"no recipe given: {USAGE}")
    run(load_recipe(path, overrides), resume=resume)
    return 0


if __name__ == "__main__":
    from gspo_trl.cli.main import run_command

    sys.exit(run_command("train", main, sys.argv[1:]))
