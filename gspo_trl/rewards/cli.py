"""``gspo-trl rewards ...``: list the rewards a recipe can name, or describe one.

gspo-trl rewards list                 # every reward: parameters (with defaults), columns
gspo-trl rewards list --import myrewards.numeric   # ... and the ones a module of yours registers
gspo-trl rewards describe cosine      # one reward, or a path: my_pkg.mod:fn, file.py:fn
"""

from __future__ import annotations

import argparse
import sys

import gspo_trl.rewards as rewards
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gspo-trl rewards", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="every reward with its parameters and the dataset columns it needs")
    listing.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module of your own rewards first (as a recipe's `imports:` does); repeatable",
    )
    describe = sub.add_parser("describe", help="one reward, by name or path")
    describe.add_argument("spec")
    args = parser.parse_args(argv)
    if args.command == "list":
        try:
            infos = rewards.available(args.imports)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print("\n\n".join(format_info(info) for info in infos))
        return 0
    try:
        print(format_info(rewards.describe(args.spec)))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
