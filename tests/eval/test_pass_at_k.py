"""pass@k against hand-computed values, edge cases, and the pass definition."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from datasets import Dataset

from gspo_trl.data.synthetic import digit_reversal_reward, exact_match
from gspo_trl.eval.pass_at_k import grade_samples, is_pass, mean_pass_at_k, pass_at_k

# (n, c, k, expected): expected worked out by hand as 1 - C(n-c, k) / C(n, k).
HAND_TABLE = [
    (1, 0, 1, Fraction(0)),
    (1, 1, 1, Fraction(1)),
    (5, 2, 1, Fraction(2, 5)),  # pass@1 = c/n
    (5, 2, 2, Fraction(7, 10)),  # 1 - 3/10
    (10, 3, 4, Fraction(5, 6)),  # 1 - 35/210
    (8, 1, 2, Fraction(1, 4)),  # 1 - 21/28
    (20, 5, 10, 1 - Fraction(3003, 184756)),  # C(15,10)=3003, C(20,10)=184756
    (5, 2, 5, Fraction(1)),  # n = k with a pass: any draw holds every sample
    (5, 0, 5, Fraction(0)),  # n = k, c = 0
    (4, 0, 1, Fraction(0)),  # c = 0
    (6, 0, 3, Fraction(0)),  # c = 0
    (6, 6, 1, Fraction(1)),  # c = n
    (6, 6, 6, Fraction(1)),  # c = n = k
    (6, 4, 3, Fraction(1)),  # n - c < k: a draw of k always holds a pass
    (200, 1, 1, Fraction(1, 200)),
]


@pytest.mark.parametrize(("n", "c", "k", "expected"), HAND_TABLE)
def test_pass_at_k_matches_hand_values(n: int, c: int, k: int, expected: Fraction) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 16])
def test_pass_at_k_equals_exact_combinatorics_on_a_grid(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
            assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12), (n, c, k)


def test_pass_at_1_is_the_pass_fraction_and_pass_at_k_grows_with_k() -> None:
    values = [pass_at_k(16, 3, k) for k in range(1, 17)]
    assert values[0] == pytest.approx(3 / 16)
    assert all(a <= b for a, b in itertools.pairwise(values))
    assert values[-1] == 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 2, 5), (4, 2, 0)])
def test_pass_at_k_refuses_impossible_inputs(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_problems() -> None:
    assert mean_pass_at_k([0, 2, 4], 4, 1) == pytest.approx((0 + 0.5 + 1) / 3)
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k([], 4, 1)


@pytest.mark.parametrize(
    ("reward", "threshold", "expected"),
    [
        (1.0, 1.0, True),
        (0.999, 1.0, False),
        (0.0, 1.0, False),
        (0.5, 0.5, True),
        (0.49, 0.5, False),
        (None, 0.0, False),
        (float("nan"), 0.0, False),
    ],
)
def test_is_pass(reward: float | None, threshold: float, expected: bool) -> None:
    assert is_pass(reward, threshold) is expected


def test_grade_samples_uses_each_rows_columns() -> None:
    rows = Dataset.from_list(
        [{"prompt": "reverse 12", "solution": "21"}, {"prompt": "reverse 34", "solution": "43"}]
    )
    samples = [["21", "12", " 21 "], ["43", "4", "34"]]
    graded = grade_samples(exact_match, rows, samples)
    assert graded.passes == [2, 1]
    assert graded.pass_rates == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    assert graded.pass_at(1) == pytest.approx(0.5)
    assert graded.pass_at(3) == 1.0
    partial = grade_samples(digit_reversal_reward, rows, samples, threshold=0.5)
    assert partial.passes == [2, 2]  # "4" vs "43" scores 0.5: a pass at threshold 0.5


def test_grade_samples_refuses_ragged_samples() -> None:
    rows = Dataset.from_list([{"prompt": "a", "solution": "1"}, {"prompt": "b", "solution": "2"}])
    with pytest.raises(ValueError, match="same number"):
        grade_samples(exact_match, rows, [["1"], ["2", "2"]])
