"""`gspo-trl filter RECIPE --min 0.1 --max 0.9`: keep the prompts the model sometimes solves.

Arguments and printing only; the work is done by gspo_trl.eval.filter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.eval.filter import FilterSettings, filter_dataset


def parse_args(argv: Sequence[str]) -> FilterSettings:
    """The settings the command line asks for; unknown --key value pairs are recipe overrides."""
    parser = ArgumentParser(prog="gspo-trl filter", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("recipe", help="recipe YAML; further --key value pairs override it")
    parser.add_argument(
        "--min", type=float, default=0.0, dest="low", help="lowest pass rate kept (inclusive)"
    )
    parser.add_argument(
        "--max", type=float, default=1.0, dest="high", help="highest pass rate kept (inclusive)"
    )
    parser.add_argument(
        "--num-samples", type=int, help="G samples per prompt (default: recipe's num_generations)"
    )
    parser.add_argument("--reward", help="grade with this one reward instead of the recipe's weighted sum")
    parser.add_argument("--pass-threshold", type=float, default=1.0)
    parser.add_argument("--split", help="split to filter (default: the recipe's data.split)")
    parser.add_argument("--output", default="filtered.jsonl", help=".jsonl or .parquet")
    parser.add_argument(
        "--push-to-hub", metavar="REPO", help="also push the kept rows to this hub dataset repo"
    )
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--resume", action="store_true", help="keep finished chunks of an earlier run")
    parser.add_argument("--engine", default="auto", choices=("auto", "hf", "vllm"))
    parser.add_argument("--seed", type=int, default=0)
    args, overrides = parser.parse_known_args(list(argv))
    return FilterSettings(**vars(args), overrides=tuple(overrides))


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    result = filter_dataset(parse_args(sys.argv[1:] if argv is None else argv))
    print(result.histogram)
    print(f"wrote {result.kept} rows to {result.output}; histogram: {result.histogram_png}")
    return 0
