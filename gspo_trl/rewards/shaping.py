"""Shaping rewards: format, tag count, think format, repetition, DAPO's soft overlong penalty.

They look at the completion alone (no verifier), cost microseconds, and are meant to be
added with small weights next to a correctness reward. ``cosine`` lives in
``gspo_trl.rewards.cosine`` because it needs the math verifier.
"""

from __future__ import annotations

import re
from typing import Any

from gspo_trl.rewards.completions import completion_texts, completion_tokens
from gspo_trl.rewards.registry import register


@register(
    "format",
    factory=True,
    summary="1.0 if the text is <think>...</think> then <answer>...</answer>, else 0.0",
)
class ThinkAnswerFormat:
    """1.0 when the completion is exactly one think block followed by one answer block.

    Whitespace around and between the blocks is allowed; text outside them, missing or
    repeated tags give 0.0. Tag names are parameters for models with other conventions.
    """

    def __init__(self, think_tag: str = "think", answer_tag: str = "answer") -> None:
        for tag in (think_tag, answer_tag):
            if not re.fullmatch(r"[A-Za-z_][\w-]*", tag):
                raise ValueError(f"tag {tag!r} is not a valid tag name")
        t, a = re.escape(think_tag), re.escape(answer_tag)
        self._pattern = re.compile(
            rf"\s*<{t}>(?:(?!</?{t}>).)*</{t}>\s*<{a}>(?:(?!</?{a}>).)*</{a}>\s*", re.DOTALL
        )
        self.__name__ = "format"

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [1.0 if self._pattern.fullmatch(t) else 0.0 for t in completion_texts(completions)]


@register("tag_count", factory=True, summary="0.25 per think/answer open/close tag that occurs exactly once")
class TagCount:
    """Partial credit for the format: 0.25 for each of the four tags present exactly once.

    Denser than ``format`` early in training, when the model has not found the full
    structure yet (open-r1's ``tag_count_reward``, without its exact-newline demands).
    """

    def __init__(self, think_tag: str = "think", answer_tag: str = "answer") -> None:
        self._tags = (f"<{think_tag}>", f"</{think_tag}>", f"<{answer_tag}>", f"</{answer_tag}>")
        self.__name__ = "tag_count"

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [sum(0.25 for tag in self._tags if t.count(tag) == 1) for t in completion_texts(completions)]


@register(
    "think_format",
    factory=True,
    summary="1.0 if the text opens with one <think>...</think> block (TRL's think_format_reward)",
)
class ThinkFormat:
    """1.0 when the completion starts with ``<think>``, closes it, and opens no second one.

    For reasoning models whose answer follows the think block as free text (no
    ``<answer>`` tags): TRL's ``think_format_reward``, with the tag name a parameter.
    """

    def __init__(self, think_tag: str = "think") -> None:
        if not re.fullmatch(r"[A-Za-z_][\w-]*", think_tag):
            raise ValueError(f"tag {think_tag!r} is not a valid tag name")
        t = re.escape(think_tag)
        self._pattern = re.compile(rf"^<{t}>(?!.*<{t}>)(.*?)</{t}>.*$", re.DOTALL | re.MULTILINE)
        self.__name__ = "think_format"

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [1.0 if self._pattern.match(t) else 0.0 for t in completion_texts(completions)]


@register(
    "repetition",
    factory=True,
    aliases=("repetition_penalty",),
    summary="n-gram repetition penalty over completion tokens, in [max_penalty, 0]",
)
class RepetitionPenalty:
    """``(1 - unique n-grams / all n-grams) * max_penalty`` over the completion's tokens
    (arXiv 2502.03373, App. C.2; TRL's ``get_repetition_penalty_reward``).

    0.0 for text without repeats (or shorter than ``ngram_size`` tokens), ``max_penalty``
    approached by degenerate loops. Tokens are TRL's ``completion_ids``; a direct call
    without them uses lower-cased whitespace words (open-r1's reading), with one warning.
    """

    def __init__(self, ngram_size: int = 3, max_penalty: float = -1.0) -> None:
        if ngram_size < 1:
            raise ValueError(f"ngram_size must be >= 1, got {ngram_size}")
        if max_penalty > 0:
            raise ValueError(f"max_penalty must be <= 0 (it is a penalty), got {max_penalty}")
        self.ngram_size, self.max_penalty = ngram_size, max_penalty
        self.__name__ = "repetition"

    def never_acts(self, max_completion_length: int) -> str | None:
        """Why every completion of a run capped at `max_completion_length` tokens scores 0 here."""
        if self.max_penalty == 0:
            return "max_penalty 0: it scores 0 for every completion"
        if max_completion_length > self.ngram_size:
            return None
        return (
            f"ngram_size {self.ngram_size} needs at least {self.ngram_size + 1} tokens for a repeat, but "
            f"completions stop at max_completion_length {max_completion_length}: it scores 0 for every "
            "completion"
        )

    def __call__(
        self, completions: list[Any] | None = None, completion_ids: list[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        lowered = None if completions is None else [t.lower() for t in completion_texts(completions)]
        return [self._penalty(u) for u in completion_tokens("repetition", lowered, completion_ids)]

    def _penalty(self, units: list[Any]) -> float:
        n = self.ngram_size
        if len(units) < n:
            return 0.0
        ngrams = [tuple(units[i : i + n]) for i in range(len(units) - n + 1)]
        return (1.0 - len(set(ngrams)) / len(ngrams)) * self.max_penalty + 0.0


@register(
    "soft_overlong",
    factory=True,
    aliases=("soft_overlong_punishment",),
    summary="DAPO's soft overlong penalty on completion tokens, in [-1, 0]",
)
class SoftOverlongPenalty:
    """DAPO (arXiv 2503.14476, eq. 13): 0 up to ``max_completion_len - soft_punish_cache``
    tokens, then a linear ramp down to -1 at ``max_completion_len``, -1 beyond.
    ``soft_punish_cache=0`` is a hard cut-off: 0 up to ``max_completion_len``, -1 beyond.

    Lengths are TRL's ``completion_ids`` (called as TRL's ``get_soft_overlong_punishment``
    is, ``fn(completion_ids=...)``, or with completions too); a direct call without them
    counts whitespace words, with one warning. Set ``max_completion_len`` to the recipe's
    ``max_completion_length``.
    """

    def __init__(self, max_completion_len: int = 4096, soft_punish_cache: int = 512) -> None:
        if max_completion_len <= 0:
            raise ValueError(f"max_completion_len must be > 0, got {max_completion_len}")
        if not 0 <= soft_punish_cache <= max_completion_len:
            raise ValueError(
                f"soft_punish_cache must be in [0, max_completion_len={max_completion_len}], "
                f"got {soft_punish_cache}"
            )
        self.max_len, self.cache = max_completion_len, soft_punish_cache
        self.__name__ = "soft_overlong"

    def never_acts(self, max_completion_length: int) -> str | None:
        """Why every completion of a run capped at `max_completion_length` tokens scores 0 here."""
        start = self.max_len - self.cache
        if max_completion_length > start:
            return None
        return (
            f"max_completion_len {self.max_len} - soft_punish_cache {self.cache} = {start} tokens before "
            f"any penalty, but completions stop at max_completion_length {max_completion_length}: it scores "
            f"0 for every completion; set max_completion_len: {max_completion_length}"
        )

    def __call__(
        self, completions: list[Any] | None = None, completion_ids: list[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        start = self.max_len - self.cache
        lengths = [len(t) for t in completion_tokens("soft_overlong", completions, completion_ids)]
        return [
            0.0 if n <= start else -1.0 if n > self.max_len else (start - n) / self.cache for n in lengths
        ]
