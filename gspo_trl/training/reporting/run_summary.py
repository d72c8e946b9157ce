"""The lines a run ends with: where its time went (each phase's share) and its token rates.

The trainer logs each phase's seconds summed over the run in its final event (`perf/total/
{phase}_s`, gspo_trl.training.reporting.phases) and, per logging window, the generated and trained
tokens and the window's wall time (`perf/generated_tokens`, `perf/trained_tokens`, `perf/wall_s`).
`RunTotals` adds the windows up as the console sees them; `summary_lines` turns both into

    time     generation 46% | update 31% | old_logprobs 9% | rewards 2% | other 12% (of 37 s)
    tokens   812 generated tok/s, 1,535 trained tok/s per process (over the logged windows)

Phases under 0.5% are left out. The rates are over the logged windows (a tail of steps after the
last logging step is not in them); per process, as the step line's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gspo_trl.core.metric_names as names
from gspo_trl.core.progress import duration

SHOWN_SHARE = 0.005
"""Phases below this share of the run are left out of the time line."""


@dataclass
class RunTotals:
    """Generated and trained tokens and wall seconds, summed over the logged windows."""

    generated: float = 0.0
    trained: float = 0.0
    wall: float = 0.0

    def add(self, logs: dict[str, Any]) -> None:
        wall = logs.get(names.PERF_WALL)
        if not isinstance(wall, int | float) or math.isnan(wall):
            return
        self.wall += wall
        self.generated += float(logs.get(names.PERF_GENERATED_TOKENS) or 0.0)
        self.trained += float(logs.get(names.PERF_TRAINED_TOKENS) or 0.0)


def summary_lines(final_logs: dict[str, Any], totals: RunTotals, processes: int = 1) -> list[str]:
    """The time line (from the final event's perf/total/*) and the tokens line; [] without them."""
    phases = (*names.PHASES, names.PHASE_OTHER)
    seconds = {p: float(final_logs.get(names.perf_total(p)) or 0.0) for p in phases}
    run = sum(seconds.values())
    lines = []
    if run > 0:
        shares = sorted(((s / run, p) for p, s in seconds.items() if s / run >= SHOWN_SHARE), reverse=True)
        other = [f"{p} {share:.0%}" for share, p in shares if p != names.PHASE_OTHER]
        rest = [f"{p} {share:.0%}" for share, p in shares if p == names.PHASE_OTHER]
        lines.append(f"time     {' | '.join(other + rest)} (of {duration(run)})")
    if totals.wall > 0:
        per_process = totals.wall * max(processes, 1)
        lines.append(
            f"tokens   {totals.generated / per_process:,.0f} generated tok/s, "
            f"{totals.trained / per_process:,.0f} trained tok/s per process (over the logged windows)"
        )
    return lines
