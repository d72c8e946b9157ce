"""``gspo-trl rewards ...``: list the rewards a recipe can name, or describe one.

gspo-trl rewards list                 # every reward: parameters (with defaults), columns
gspo-trl rewards list --import myrewards.numeric   # ... and the ones a module of yours registers
gspo-trl rewards describe cosine      # one reward, or a path: my_pkg.mod:fn, file.py:fn
gspo-trl rewards describe numeric --import myrewards.numeric   # one of your own
"""

from __future__ import annotations

import argparse
import sys

import gspo_trl.rewards as rewards
from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.rewards.loading import import_modules, modules_registering
from gspo_trl.rewards.registry import RewardInfo


def format_info(info: RewardInfo) -> str:
    params = ", ".join(
        f"{p.name}" + (" (required)" if p.required else f"={p.default!r}") for p in info.parameters
    )
    columns = ", ".join(info.columns) or "-"
    flags = " [async]" if info.is_async else ""
    aliases = f"\n    aliases: {', '.join(info.aliases)}" if info.aliases else ""
    params = f"{params}, " * bool(params) + f"label={info.name!r}"  # label: the metric name
    return (
        f"{info.name}{flags}\n    {info.summary}\n    params: {params}\n"
        f"    columns: {columns}{aliases}\n    source: {info.source}"
    )


def _add_imports(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module of your own rewards first (as a recipe's `imports:` does); repeatable",
    )


def _describe(spec: str, imports: list[str]) -> str:
    """One reward's description, after `imports`; an unknown name that a module in the working
    directory registers is answered with the `--import` it lacks."""
    import_modules(imports)
    try:
        return format_info(rewards.describe(spec))
    except rewards.UnknownRewardError as error:
        modules = [] if ":" in spec else modules_registering(spec)
        if modules:
            raise rewards.UnknownRewardError(f"{error}; did you forget `--import {modules[0]}`?") from None
        raise


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="gspo-trl rewards", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="every reward with its parameters and the dataset columns it needs")
    _add_imports(listing)
    describe = sub.add_parser("describe", help="one reward, by name or path")
    describe.add_argument("spec")
    _add_imports(describe)
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            print("\n\n".join(format_info(info) for info in rewards.available(args.imports)))
        else:
            print(_describe(args.spec, args.imports))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
