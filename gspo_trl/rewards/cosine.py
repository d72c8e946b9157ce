"""``cosine``: correctness scaled by length on a cosine schedule (arXiv 2502.03373, App. C.1).

A correct answer earns ``max_value_correct`` when short, falling to ``min_value_correct``
at ``max_len`` tokens; a wrong one earns ``min_value_wrong`` when short, rising to
``max_value_wrong`` at ``max_len`` (long wrong attempts are penalised less, to keep
exploring). Correctness is the ``math`` reward's verdict; an unparseable gold gives None.
"""

from __future__ import annotations

import math
from typing import Any

from gspo_trl.rewards.completions import completion_tokens
from gspo_trl.rewards.math_verify_reward import MathReward
from gspo_trl.rewards.registry import register


@register(
    "cosine",
    factory=True,
    columns=("solution",),
    summary="math correctness scaled by completion length (cosine schedule up to max_len tokens)",
)
class CosineScaledReward:
    """See the module docstring. Lengths are TRL's ``completion_ids`` token counts (a
    direct call without them counts whitespace words, with one warning). ``math_params``
    are the ``math`` reward's options (``answer_format``, ``reasoning_delimiters``, ...)
    for the correctness verdict."""

    def __init__(
        self,
        max_len: int = 1000,
        min_value_wrong: float = -1.0,
        max_value_wrong: float = -0.5,
        min_value_correct: float = 0.5,
        max_value_correct: float = 1.0,
        timeout: float = 5.0,
        math_params: dict[str, Any] | None = None,
    ) -> None:
        if max_len <= 0:
            raise ValueError(f"max_len must be > 0 tokens, got {max_len}")
        self.max_len = max_len
        self.wrong = (min_value_wrong, max_value_wrong)
        self.correct = (min_value_correct, max_value_correct)
        self.verifier = MathReward(timeout=timeout, **(math_params or {}))
        self.__name__ = "cosine"

    def __call__(
        self,
        completions: list[Any],
        solution: list[str],
        completion_ids: list[list[int]] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        verdicts = self.verifier(completions, solution=solution)
        lengths = [len(t) for t in completion_tokens("cosine", completions, completion_ids)]
        return [
            None if ok is None else self.scale(bool(ok), n) for ok, n in zip(verdicts, lengths, strict=True)
        ]

    def scale(self, correct: bool, length: int) -> float:
        """Reward of one completion of ``length`` tokens (lengths past max_len count as max_len)."""
        progress = min(length, self.max_len) / self.max_len
        cosine = math.cos(progress * math.pi)
        if correct:
            low, high = self.correct
        else:
            high, low = self.wrong  # short wrong answers get the most negative value
        return low + 0.5 * (high - low) * (1.0 + cosine)
