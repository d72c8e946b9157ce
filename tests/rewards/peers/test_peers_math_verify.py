"""Math-Verify's test tables run through our ``math`` reward (huggingface/Math-Verify tests/).

The upstream prediction is the completion and the upstream gold the ``solution``, with the
checker options the upstream test passes (``precision`` -> ``float_rounding``, ``strict``,
``allow_set_relation_comp``). Each row agrees with math-verify's expected verdict or names
a documented difference (``math_verify_cases.DIFFERENCES``, listed in docs/rewards.md);
a documented row must still differ, so a stale entry fails too.
"""

from __future__ import annotations

import json

import pytest
from math_verify_cases import CASES, DIFFERENCES  # beside this file (pytest puts its folder on sys.path)

from gspo_trl import rewards


@pytest.fixture(scope="module")
def verdicts() -> dict[str, float | None]:
    """Every case in a few batched calls (one per set of checker options): ~5 s, not 255 calls."""
    by_options: dict[str, list[tuple]] = {}
    for case in CASES:
        by_options.setdefault(json.dumps(case[3], sort_keys=True), []).append(case)
    out: dict[str, float | None] = {}
    for options, cases in by_options.items():
        fn = rewards.get("math", timeout=10.0, workers=2, **json.loads(options))
        scores = fn([c[2] for c in cases], solution=[c[1] for c in cases])
        out.update({c[0]: s for c, s in zip(cases, scores, strict=True)})
    return out


@pytest.mark.parametrize(
    ("case_id", "upstream", "difference", "ours"), [pytest.param(c[0], *c[4:], id=c[0]) for c in CASES]
)
def test_case(verdicts, case_id, upstream, difference, ours):
    if difference is None:
        assert verdicts[case_id] == float(upstream)
    else:
        assert difference in DIFFERENCES
        assert verdicts[case_id] == ours and ours != float(upstream)
