"""pass@k and pass rates: what counts as a pass, and the unbiased estimator of the Codex paper.

A sample *passes* when its reward is at least `threshold` (default 1.0: binary verifiers
such as `math` and `code` with `scoring=binary` give 1.0 for right, 0.0 for wrong). For a
partial-credit reward (the code reward's default `fraction` scoring, `digit_reversal_reward`)
the threshold decides: 1.0 means "fully right", a lower value accepts partial answers. A
reward of None (the verifier could not judge, e.g. an unparsable gold answer) is not a pass,
and the row it belongs to is reported as unjudged.

pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): with n
samples per problem of which c pass, the probability that at least one of k samples drawn
without replacement passes is 1 - C(n-c, k) / C(n, k). It is unbiased for the pass@k of
the model, unlike 1 - (1 - c/n)^k. Computed as a product to stay exact for large n.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with `n` samples, `c` of them passing (0 <= c <= n, k <= n)."""
    if not 0 <= c <= n:
        raise ValueError(f"pass@k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k: need 1 <= k <= n (samples per problem), got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(counts: Sequence[int], n: int, k: int) -> float:
    """pass@k averaged over problems, each with `n` samples and `counts[i]` passes."""
    if not counts:
        raise ValueError("pass@k: no problems to average over")
    return sum(pass_at_k(n, c, k) for c in counts) / len(counts)


def is_pass(reward: float | None, threshold: float) -> bool:
    """Whether one sample passes: a judged reward at or above `threshold`."""
    return reward is not None and not math.isnan(reward) and reward >= threshold


@dataclass
class GradedSamples:
    """The grades of `n` samples for each of a set of prompts, and what follows from them."""

    rewards: list[list[float | None]]
    """rewards[i][j]: grade of sample j of prompt i (None: not judged)."""
    threshold: float

    @property
    def passes(self) -> list[int]:
        """Passing samples per prompt."""
        return [sum(is_pass(r, self.threshold) for r in row) for row in self.rewards]

    @property
    def pass_rates(self) -> list[float]:
        """Fraction of each prompt's samples that pass (0-1)."""
        return [count / len(row) for count, row in zip(self.passes, self.rewards, strict=True)]

    @property
    def judged(self) -> float:
        """Fraction of samples the grader could judge (0-1)."""
        grades = [r for row in self.rewards for r in row]
        return sum(r is not None and not math.isnan(r) for r in grades) / len(grades) if grades else 0.0

    def pass_at(self, k: int) -> float:
        n = len(self.rewards[0])
        return mean_pass_at_k(self.passes, n, k)


def grade_samples(
    grader: Callable[..., list[float | None]],
    rows: Any,
    samples: Sequence[Sequence[str]],
    threshold: float = 1.0,
) -> GradedSamples:
    """Grade every sample of every row in one grader call (so a worker pool sees the whole batch).

    `rows` is a datasets.Dataset (or mapping of columns) aligned with `samples`; each sample is
    graded with its row's columns, exactly as TRL calls a reward during training.
    """
    columns = {name: list(rows[name]) for name in rows.column_names}
    if len(samples) != len(columns["prompt"]):
        raise ValueError(f"grade_samples: {len(samples)} sample lists for {len(columns['prompt'])} rows")
    sizes = {len(group) for group in samples}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"grade_samples: every row needs the same number (>0) of samples, got {sizes}")
    flat = [text for group in samples for text in group]
    repeated = {
        name: [v for v, g in zip(values, samples, strict=True) for _ in g] for name, values in columns.items()
    }
    prompts = repeated.pop("prompt")
    grades = list(grader(flat, prompts=prompts, **repeated))
    if len(grades) != len(flat):
        raise ValueError(f"grader returned {len(grades)} rewards for {len(flat)} completions")
    n = sizes.pop()
    return GradedSamples([grades[i : i + n] for i in range(0, len(grades), n)], threshold)
