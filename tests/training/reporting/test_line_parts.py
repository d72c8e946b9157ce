"""The step line is built from the console's parts and each probe's `step_line_parts`, sorted by
place: the text is byte for byte what the console printed when it named each capability itself
(the expected lines below were printed by the code before the probes declared their parts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import gspo_trl.core.metric_names as names
from gspo_trl.training.probes.base import Probe
from gspo_trl.training.reporting.console_lines import step_line
from gspo_trl.training.reporting.line_parts import STEP_SECONDS, LinePart
from tests.training.reporting._line_probes import line_probes

EVERY_PART = {
    "loss": 0.1,
    "reward": 0.123456,
    "reward_std": 0.4567,
    f"{names.TRL_REWARDS}/a/mean": 0.25,
    f"{names.TRL_REWARDS}/b/mean": 0.5,
    "gspo/offpolicy/clip/region": 0.123,
    "gspo/offpolicy/log_ratio/std": 1.234e-3,
    names.under(names.OFFPOLICY, names.FLIP_RATE): 0.72,
    names.ROUTING_REPLAYED: 1.0,
    names.STALENESS_MEAN: 0.5,
    names.STALENESS_MAX: 1.0,
    names.CORRECTION_WEIGHT_MEAN: 1.0021,
    names.CORRECTION_WEIGHT_P1: 0.97,
    names.CORRECTION_WEIGHT_P99: 1.05,
    names.ZERO_VARIANCE_GROUPS: 0.25,
    names.DYNAMIC_KEEP_RATE: 0.4,
    names.DYNAMIC_ROUNDS: 2.0,
    names.PERF_TRAINED_TOKENS_PER_S: 1234.5,
    names.PERF_MFU: 0.012,
}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            (EVERY_PART, 12, 100, 0.52, 0.875),
            "step  12/100 | reward 0.123 ±0.46 [a 0.25 b 0.50] | held-out 0.875 | clip 12.3% | "
            "log s std 1.2e-03 | expert flips 72.0% (router vs replayed, replay 100%) | "
            "stale 0.5 (max 1) | w_i 1.002 [0.97, 1.05] | zero-var 25% | kept 40% in 2.0 rounds | "
            "1,234 tok/s MFU 1.2% | 0.52 s/step | ETA 46s",
        ),
        (
            ({"loss": 0.1}, 13, 100, 0.52, None, 30.0, {"reward": 0.5, "reward_std": 0.1, "step": 12}),
            "step  13/100 | reward 0.500 ±0.10 (rollout of step 12) | 0.52 s/step | ETA 30s",
        ),
        (
            ({"loss": 0.1, names.under(names.OFFPOLICY, names.FLIP_RATE): 0.125}, 3, 9, None),
            "step 3/9 | expert flips 12.5%",
        ),
    ],
    ids=["every part", "carried reward", "flips alone"],
)
def test_the_step_line_is_byte_for_byte_the_consoles(args: tuple, expected: str) -> None:
    assert step_line(*args, probes=line_probes()) == expected


class _QueueProbe(Probe):
    """A new capability: its part goes between the clip rate (30) and the spread (40)."""

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        return [LinePart(35, f"queue {logs['queue']:.0f}")] if "queue" in logs else []


def test_a_new_probe_adds_its_part_at_its_place_without_touching_the_console() -> None:
    chain = line_probes()
    chain.append(_QueueProbe())
    logs = {"loss": 0.1, "gspo/offpolicy/clip/region": 0.1, "gspo/offpolicy/log_ratio/std": 1e-3, "queue": 3}
    assert step_line(logs, 1, 2, 1.0, probes=chain) == (
        "step 1/2 | clip 10.0% | queue 3 | log s std 1.0e-03 | 1.00 s/step | ETA 1s"
    )
    assert STEP_SECONDS > 100  # the built-in parts' places (30..100) come before the timing
