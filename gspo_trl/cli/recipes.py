"""`gspo-trl recipes list` and `gspo-trl recipes copy NAME DEST`: the recipes and configs shipped
with the package (as torchtune's `tune ls` / `tune cp`), usable from an installed wheel."""

from __future__ import annotations

from collections.abc import Sequence

from gspo_trl.config.recipe import read_yaml
from gspo_trl.config.shipped import copy_shipped, shipped_configs, shipped_recipes
from gspo_trl.core.arguments import ArgumentParser


def _summary(path) -> str:
    """A recipe's first header line (what it trains), without the comment mark."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="gspo-trl recipes", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the shipped recipes and accelerate configs")
    copy = commands.add_parser("copy", help="copy a shipped recipe or config to edit it")
    copy.add_argument("name", help="e.g. qwen3-1.7b/math or zero3")
    copy.add_argument("destination", help="a file path, or a directory to copy into")
    args = parser.parse_args(list(argv or []))
    if args.command == "copy":
        print(f"copied {args.name} to {copy_shipped(args.name, args.destination)}")
        return 0
    recipes = shipped_recipes()
    width = max(map(len, recipes))
    print("recipes (gspo-trl train NAME, or `gspo-trl recipes copy NAME my.yaml` to edit):")
    for name, path in recipes.items():
        read_yaml(path)  # a shipped recipe that does not parse is a packaging bug: fail loudly
        print(f"  {name:<{width}}  {_summary(path)}")
    print("accelerate configs (accelerate launch --config_file PATH):")
    for name, path in shipped_configs().items():
        print(f"  {name:<{width}}  {path}")
    return 0
