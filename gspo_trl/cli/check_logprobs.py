"""`gspo-trl check-logprobs`: does the generation engine score tokens the way the trainer does?

Arguments and printing only; the work is done by gspo_trl.diagnose.check_logprobs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gspo_trl.config.sections import MAX_BIAS_FRACTION, MAX_OUTSIDE_CLIP
from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.core.errors import UserError
from gspo_trl.diagnose.check_logprobs import CheckLogprobsSettings, check_logprobs, format_report


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="gspo-trl check-logprobs",
        allow_abbrev=False,  # unknown --keys are recipe overrides, never abbreviations of ours
        description="Sample with vLLM, rescore with the trainer, and say whether the engine's log-probs "
        "are safe to use as pi_old under the recipe's eps (exit 0 safe, 1 unsafe).",
    )
    parser.add_argument("recipe", nargs="?", type=Path, help="recipe YAML; --key value pairs override it")
    parser.add_argument("--model", type=Path, help="model dir instead of a recipe (diagnostic trainer)")
    parser.add_argument("--prompts", type=Path, help="with --model: .jsonl ('prompt' key) or .txt lines")
    parser.add_argument("--num-prompts", type=int, default=8, help="distinct prompts to sample (default 8)")
    parser.add_argument("--num-generations", type=int, help="completions per prompt (default: the recipe's)")
    parser.add_argument("--train-steps", type=int, default=0, help="GSPO steps to train before measuring")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="with --model (default 1e-3)")
    parser.add_argument("--max-completion-length", type=int, default=32, help="with --model (default 32)")
    parser.add_argument("--max-model-length", type=int, default=256, help="with --model: vLLM context")
    parser.add_argument(
        "--max-outside-clip",
        "--max-clipped-fraction",  # its old name
        dest="max_outside_clip",
        type=float,
        default=MAX_OUTSIDE_CLIP,
        help=f"verdict limit, as the run's engine.max_outside_clip (default {MAX_OUTSIDE_CLIP})",
    )
    parser.add_argument(
        "--max-bias-fraction",
        type=float,
        default=MAX_BIAS_FRACTION,
        help=f"verdict limit, as the run's engine.max_bias_fraction (default {MAX_BIAS_FRACTION})",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("runs/check-logprobs"), help="with --model")
    parser.add_argument("--json", type=Path, help="also write the full report here")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `gspo-trl check-logprobs`; returns the exit status."""
    parser = build_parser()
    args, overrides = parser.parse_known_args(argv)
    options = {k: v for k, v in vars(args).items() if k != "json"}
    try:
        settings = CheckLogprobsSettings(**options, overrides=tuple(overrides))
    except UserError as error:  # a bad combination of options: argparse's usage line and exit 2
        parser.error(str(error))
    check = check_logprobs(settings)
    print(format_report(check.report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(check.report, indent=2))
    return 0 if check.safe else 1
