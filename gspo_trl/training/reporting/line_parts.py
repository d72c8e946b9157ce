"""The pieces of the console's start banner and step line that probes add, and where each goes.

A probe returns `LinePart`s from `banner_lines(trainer)` and `step_line_parts(logs)`
(gspo_trl.training.probes.base); the console shows its own and the probes' parts sorted by `place`
(ties in chain order). The console's own places are below; a new probe picks a free one between.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# the banner: the console's lines, and the probes' between them
BANNER_GSPO = 40
"""`  GSPO     sequence-level ratio, eps ...`; capability lines (`  engine ...`) follow it."""
BANNER_RUN = 60
"""`  run      N steps on ...`; lines about the model's run (MoE, the FLOP floor) follow it."""

# the step line: the console's parts, and the probes' between them
STEP_HELDOUT = 20
"""`held-out 0.250` (after `step i/N` and the reward)."""
STEP_SECONDS = 200
"""`0.52 s/step` then `ETA 1m`: the probes' parts come before."""


@dataclass(frozen=True)
class LinePart:
    """One banner line or one ` | `-separated part of the step line, at `place`."""

    place: int
    text: str


def logged_number(logs: Any, key: str) -> float | None:
    """A logged number, None when absent, not a number or NaN (the part is then left out)."""
    value = logs.get(key)
    return float(value) if isinstance(value, int | float) and not math.isnan(value) else None
