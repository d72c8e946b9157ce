"""`gspo-trl demo` (what `make demo` runs): GSPO that visibly learns, on 2 CPU cores, no hub.

Arguments and printing only; the work is done by gspo_trl.demo.pipeline.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.demo.baselines import baseline_lines
from gspo_trl.demo.pipeline import DEFAULT_RECIPE, DEFAULT_SFT_STEPS, run_demo


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The demo's options, and the recipe overrides (`--key value`, --max-steps among them)."""
    parser = ArgumentParser(
        prog="gspo-trl demo",
        description=__doc__,
        epilog="Any other --key value overrides that key of the recipe, as for `gspo-trl train`.",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("runs/demo"))
    parser.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    parser.add_argument("--sft-steps", type=int, default=DEFAULT_SFT_STEPS, help="warm-start SFT steps")
    parser.add_argument("--max-steps", type=int, help="GSPO steps (default: the recipe's max_steps)")
    args, overrides = parser.parse_known_args(argv)
    if args.max_steps is not None:
        overrides += ["--max_steps", str(args.max_steps)]
    return args, overrides


def main(argv: Sequence[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results = run_demo(args.output_dir, args.recipe, args.sft_steps, overrides)
    print()
    print("GSPO demo (tiny Qwen3, digit reversal, CPU)")
    print(
        f"  held-out exact-match accuracy before GSPO: {results['heldout_accuracy_before']:.3f} (SFT alone)"
    )
    print(f"  held-out exact-match accuracy after GSPO:  {results['heldout_accuracy_after']:.3f}")
    print(f"  gain: {results['heldout_gain']:+.3f} over {results['heldout_rows']} held-out prompts")
    if "sampled_pass@4_before" in results:
        print(
            "  sampled (temperature 1): pass@1 {:.3f} -> {:.3f}, pass@4 {:.3f} -> {:.3f}".format(
                results["sampled_pass@1_before"],
                results["sampled_pass@1_after"],
                results["sampled_pass@4_before"],
                results["sampled_pass@4_after"],
            )
        )
    print(f"  model: {results['model_dir']}   reward curve: {results['reward_curve']}")
    print(f"  time: {results['total_seconds']:.0f} s (warm start {results['warm_start_seconds']:.0f} s)")
    for line in baseline_lines():
        print(line)
    return 0
