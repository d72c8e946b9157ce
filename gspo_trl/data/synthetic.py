"""The synthetic verifiable task the CPU default trains on: reverse a string of digits.

Why this task: it is verifiable exactly, it has a dense partial-credit reward (the fraction
of positions right), and a 3-layer model can represent the right rule, so what GSPO learns
is visible in minutes on 2 cores. Why a *flawed* warm start: GSPO is meant to run after a
cold start, and real cold-start data is imperfect. Here the warm-start (SFT) answers use the
right rule only `correct_fraction` of the time and otherwise make the most common mistake on
this task - echoing the digits unreversed. The warm-started model has therefore seen the
right behaviour but prefers the wrong one; the verifier's reward is what moves it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

SYSTEM_PROMPT = "Reply with the answer only."


@dataclass(frozen=True)
class ReversalTask:
    """Sizes of the synthetic task. Digit strings have `min_digits`..`max_digits` digits."""

    min_digits: int = 4
    max_digits: int = 7
    correct_fraction: float = 0.35
    """Fraction of warm-start answers that use the right rule (the rest echo the input)."""

    @property
    def distinct_problems(self) -> int:
        """How many different questions the task has: digit strings of each length that are not
        palindromes (10^L strings, of which 10^ceil(L/2) read the same both ways)."""
        lengths = range(self.min_digits, self.max_digits + 1)
        return sum(10**length - 10 ** ((length + 1) // 2) for length in lengths)

    def question(self, digits: str) -> str:
        return f"reverse {digits}"


def _random_digits(rng: random.Random, task: ReversalTask) -> str:
    length = rng.randint(task.min_digits, task.max_digits)
    while True:
        digits = "".join(rng.choice("0123456789") for _ in range(length))
        if digits != digits[::-1]:  # a palindrome cannot tell the two rules apart
            return digits


def make_rl_rows(n: int, seed: int, task: ReversalTask = ReversalTask()) -> list[dict[str, str]]:
    """Rows with a `prompt` (question text) and the `solution` column the reward reads."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        digits = _random_digits(rng, task)
        rows.append({"prompt": task.question(digits), "solution": digits[::-1]})
    return rows


def make_warm_start_rows(n: int, seed: int, task: ReversalTask = ReversalTask()) -> list[dict[str, str]]:
    """Prompt/completion rows for the warm start, with the flawed answer mix described above."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        digits = _random_digits(rng, task)
        answer = digits[::-1] if rng.random() < task.correct_fraction else digits
        rows.append({"prompt": task.question(digits), "completion": answer})
    return rows


def _completion_text(completion: str | Sequence[dict[str, str]]) -> str:
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"] if completion else ""


def positional_match(text: str, solution: str) -> float:
    """Fraction of the solution's positions that `text` gets right, after stripping whitespace.

    Extra characters beyond the solution's length cost as much as wrong ones, so padding an
    answer cannot raise its score: score = matches / max(len(text), len(solution)).
    """
    text = text.strip()
    if not solution:
        return float(text == solution)
    matches = sum(a == b for a, b in zip(text, solution, strict=False))
    return matches / max(len(text), len(solution))


def digit_reversal_reward(completions: list, solution: list[str], **_: object) -> list[float]:
    """TRL reward: partial credit per position (see `positional_match`), 1.0 iff exactly right."""
    return [positional_match(_completion_text(c), s) for c, s in zip(completions, solution, strict=True)]


def exact_match(completions: list, solution: list[str], **_: object) -> list[float]:
    """1.0 where the stripped completion equals the solution, else 0.0: the held-out metric."""
    return [float(_completion_text(c).strip() == s) for c, s in zip(completions, solution, strict=True)]
