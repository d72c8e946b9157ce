"""`gspo-trl eval MODEL_OR_RUN --data ... --k 1,8`: pass@1 and unbiased pass@k on a held-out set.

Arguments and printing only; the work is done by gspo_trl.eval.evaluate.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.core.errors import EvalError
from gspo_trl.eval.evaluate import EvalSettings, evaluate, format_table


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog="gspo-trl eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="model directory, run directory, or hub id")
    parser.add_argument("--data", help="local json/jsonl/parquet/csv, hub id, or synthetic:reversal")
    parser.add_argument("--preset", help="a dataset preset (docs/data.md); with --data: its column mapping")
    parser.add_argument(
        "--split", help="split to evaluate (default: the preset's eval split, or train for files)"
    )
    parser.add_argument(
        "--recipe",
        help="take data mapping, prompt rendering, grader, max_new_tokens and temperature from it "
        "(default: the recipe.yaml a training run saved in MODEL_OR_RUN)",
    )
    parser.add_argument("--reward", help="grader: a reward name or path (see gspo-trl rewards list)")
    parser.add_argument("--k", default="1", help="comma-separated k values, e.g. 1,8")
    parser.add_argument("--num-samples", type=int, help="samples per prompt for pass@k (default: max k)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (default: recipe's, or 1.0)")
    parser.add_argument("--max-new-tokens", type=int, help="default: recipe's max_completion_length, or 1024")
    parser.add_argument(
        "--pass-threshold", type=float, default=1.0, help="a sample passes when reward >= this"
    )
    parser.add_argument("--max-rows", type=int)
    parser.add_argument("--no-greedy", action="store_true", help="skip the greedy pass")
    parser.add_argument("--engine", default="auto", choices=("auto", "hf", "vllm"))
    parser.add_argument(
        "--completions", help="grade these completions (jsonl, a line per row) instead of a model"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output", help="JSON result file (default: MODEL_DIR/eval_results.json; see the docstring)"
    )
    parser.add_argument("--save-samples", action="store_true", help="also write OUTPUT.samples.jsonl")
    return parser.parse_args(list(argv))


def parse_ks(text: str) -> tuple[int, ...]:
    """`--k 1,8` as (1, 8)."""
    try:
        return tuple(int(k) for k in str(text).split(",") if k.strip())
    except ValueError:
        raise EvalError(f"--k: expected comma-separated integers, got {text!r}") from None


def settings_from(args: argparse.Namespace) -> EvalSettings:
    fields = {k: v for k, v in vars(args).items() if k not in ("k", "no_greedy")}
    return EvalSettings(**fields, ks=parse_ks(args.k), greedy=not args.no_greedy)


def main(argv: Sequence[str] | None = None) -> int:
    result = evaluate(settings_from(parse_args(sys.argv[1:] if argv is None else argv)))
    recipe = f" (recipe {result.recipe})" if result.recipe else ""
    print(f"{result.rows} rows of {result.data}, graded by {result.reward}{recipe}")
    print(format_table(result.results))
    print(f"results: {result.output}")
    return 0
