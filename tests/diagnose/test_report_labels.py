"""`gspo-trl report` labels and bands: words a reader knows, bands inside the score range."""

from __future__ import annotations

import pytest

from gspo_trl.diagnose.report import heldout_label, std_band
from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("heldout/score", "held-out score (greedy)"),
        ("heldout/pass@4", "held-out pass@4 (sampled)"),
        ("eval_heldout/score", "held-out score (greedy) (eval)"),
    ],
)
def test_report_legend_speaks_words_not_keys(key: str, label: str) -> None:
    assert heldout_label(key) == label


@pytest.mark.parametrize(
    ("mean", "std", "values", "low", "high"),
    [
        ([0.9, 0.2], [0.3, 0.3], [0.9, 0.2], [0.6, 0.0], [1.0, 0.5]),  # a 0-1 reward stays in 0-1
        ([2.5], [1.0], [2.5, 3.0], [1.5], [3.0]),  # a wider reward widens the range
        ([-0.5], [1.0], [-0.5], [-1.0 + 0.5], [0.5]),
    ],
)
def test_report_std_band_stays_in_the_score_range(mean, std, values, low, high) -> None:
    assert std_band(mean, std, values) == (pytest.approx(low), pytest.approx(high))
