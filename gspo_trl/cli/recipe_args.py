"""The argument shape the recipe commands share: `[RECIPE | --config RECIPE] [--resume] [--key ...]`."""

from __future__ import annotations

from collections.abc import Sequence

from gspo_trl.core.errors import RecipeError


def pop_flag(args: list[str], flag: str) -> bool:
    """Whether `flag` (a switch without a value) is in `args`; removed from it."""
    found = flag in args
    while flag in args:
        args.remove(flag)
    return found


def split_argv(argv: Sequence[str]) -> tuple[str | None, bool, list[str]]:
    """(recipe, resume flag, overrides) from `[RECIPE | --config RECIPE] [--resume] [--key value ...]`."""
    args = list(argv)
    path = None
    resume = pop_flag(args, "--resume")
    for index, token in enumerate(args):
        if token == "--config" or token.startswith("--config="):
            if token == "--config":
                if index + 1 >= len(args):
                    raise RecipeError("--config: missing the recipe path")
                path = args[index + 1]
                del args[index : index + 2]
            else:
                path = token.split("=", 1)[1]
                del args[index]
            break
    if path is None and args and not args[0].startswith("--"):
        path = args.pop(0)
    return path, resume, args
