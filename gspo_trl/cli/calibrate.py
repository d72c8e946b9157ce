"""`gspo-trl calibrate`: measure log s_i on off-policy minibatches, recommend eps_low / eps_high.

Arguments and printing only; the work is done by gspo_trl.diagnose.calibrate.
"""

from __future__ import annotations

from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.core.errors import UserError
from gspo_trl.diagnose.calibrate import CalibrateSettings, calibrate


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
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
    options = {**vars(args), "target_range": tuple(args.target_range)}
    try:
        settings = CalibrateSettings(**options, overrides=tuple(overrides))
    except UserError as error:  # options that cannot work together: argparse's usage line and exit 2
        parser.error(str(error))
    print(calibrate(settings).report)
    return 0
