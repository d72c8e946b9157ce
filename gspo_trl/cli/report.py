"""`gspo-trl report RUN_DIR`: PNG plots of a finished or running GSPO run, no GUI needed.

Arguments and printing only; the work is done by gspo_trl.diagnose.report.
"""

from __future__ import annotations

import json
from pathlib import Path

from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.core.errors import UserError
from gspo_trl.diagnose import phase_plot, routing_plot
from gspo_trl.diagnose.report import BEHAVIOUR_NOT_LOGGED, BEHAVIOUR_PNG, write_report

NOT_WRITTEN = {
    phase_plot.PHASES_PNG: phase_plot.NOT_LOGGED_NOTE,
    routing_plot.ROUTING_PNG: routing_plot.NOT_LOGGED_NOTE,
    BEHAVIOUR_PNG: BEHAVIOUR_NOT_LOGGED,
}
"""Why each PNG that `write_report` may skip (value None) was not written."""


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="gspo-trl report", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run's output_dir (trainer_state.json or checkpoint-*/)")
    parser.add_argument("--out", default=None, help="folder for the PNGs (default: RUN_DIR/report)")
    args = parser.parse_args(argv)
    try:
        written = write_report(args.run_dir, args.out)
    except (FileNotFoundError, json.JSONDecodeError) as err:
        raise UserError(f"gspo-trl report: {err}") from None
    out = Path(args.out) if args.out else Path(args.run_dir) / "report"
    for name, has_data in written.items():
        if has_data is None:
            print(f"{out / name}  not written: {NOT_WRITTEN[name]}")
        else:
            print(f"{out / name}{'' if has_data else '  (no data logged for it)'}")
    return 0
