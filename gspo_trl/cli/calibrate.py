"""`gspo-trl calibrate`: measure log s_i on off-policy minibatches, recommend eps_low / eps_high.

Arguments and printing only; the work is done by gspo_trl.diagnose.calibrate.
"""

from __future__ import annotations

import argparse

from gspo_trl.diagnose.calibrate import analyse_rows, analyse_run, calibrate_recipe
from gspo_trl.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gspo-trl calibrate", allow_abbrev=False, description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("recipe", nargs="?", help="recipe YAML; extra --key value pairs override it")
    parser.add_argument("--from-run", metavar="RUN_DIR", help="analyse an existing run's logged statistics")
    parser.add_argument("--batches", type=int, default=3, help="rollout batches to measure (default 3)")
    parser.add_argument(
        "--target-range",
        type=float,
        nargs=2,
        default=(0.15, 0.25),
        metavar=("LOW", "HIGH"),
        help="share of off-policy responses to clip per advantage sign (default 0.15 0.25; aims mid-range)",
    )
    parser.add_argument("--output-dir", help="where the throw-away run writes (default: a temp dir)")
    args, overrides = parser.parse_known_args(argv)
    low, high = args.target_range
    if not 0 < low <= high < 1:
        parser.error(f"--target-range needs 0 < LOW <= HIGH < 1, got {low} {high}")
    if args.from_run:
        try:
            print(analyse_run(args.from_run, (low, high)))
        except FileNotFoundError as error:
            raise UserError(str(error)) from None
        return 0
    if not args.recipe:
        parser.error("give a RECIPE or --from-run RUN_DIR")
    rows, eps, buckets = calibrate_recipe(args.recipe, overrides, args.batches, args.output_dir)
    print(f"\nCalibration of {args.recipe} over {args.batches} rollout batches")
    print(analyse_rows(rows, eps, (low, high), buckets))
    return 0
