"""Reading gold answers and completions for the ``math`` reward.

Finding a completion's answer (:func:`find_answer`, by ``answer_format``) is plain string work,
cheap enough for the trainer process, which uses it to judge each distinct (gold, answer) pair
once. Parsing and comparing (:func:`parse_gold`, :func:`parse_answer`, :func:`is_correct`) run
inside the reward's worker processes; math-verify is imported there only.

Where it differs from TRL's ``accuracy_reward``, on purpose: a gold without LaTeX delimiters is
wrapped in ``$...$`` first, unless it is words (then unjudged, None); answers get math-verify's
full LaTeX normalisation (``\\frac13`` parses; ``latex_shorthand=False`` restores TRL's reading).
Time limits are the worker's own interval timer plus a hard kill by the parent pool, not
math-verify's SIGALRM. The reasons and examples: docs/rewards.md ("math").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

ANSWER_FORMATS = ("boxed", "answer_line", "any")
_DELIMITER = re.compile(r"(?<!\\)\$|\\\(|\\\[|\\boxed")  # an unescaped $, \( \[ or \boxed
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")
# math-verify's own "final answer ... is" anchor (its parser.py), found here to compare positions.
# As there, the statement counts only when LaTeX follows ("is $10,455$", not "is 3.").
_FINAL_STATEMENT = re.compile(r"(?i:final answer.{0,100}?)\s+is\:?\s*(?=\$|\\\(|\\\[|\\boxed)", re.DOTALL)
# DAPO's grader (verl math_dapo.py, ``answer_pattern=r"(?i)Answer\s*:\s*([^\n]+)"``): the last
# "Answer: ..." up to the end of its line. Here markdown emphasis may also close the label
# (``**Answer:** 34``, ``**Answer**: 34``); see :func:`_strip_emphasis` for the content.
_ANSWER_LINE = re.compile(r"(?i)answer[*_]*\s*:[*_]*\s*([^\n]+)")
# Markdown emphasis around an answer: ``**34**``, ``*34*``, ``__34__`` (a lone ``_`` is LaTeX).
_EMPHASIS = re.compile(r"^(?:\*+|__)\s*|\s*(?:\*+|__)$")
_WORD_RUN = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_WORDS_ONLY = re.compile(r"[A-Za-z][A-Za-z\s'.,!-]*")
_INTEGER = re.compile(r"-?\d{1,30}")


@dataclass(frozen=True)
class Answer:
    """Where a completion's answer is: ``target`` is the text math-verify parses (also the
    key under which a verdict is shared), ``bare`` the answer alone when it is known
    (a box's or an ``Answer:`` line's content), for the integer fast path."""

    target: str
    bare: str | None
    form: str  # "boxed", "statement", "answer_line", "search" (math-verify over the whole text)


def find_answer(text: str, answer_format: str = "boxed") -> Answer | None:
    """The answer of a completion, or None when it gives none in the forms asked for.

    * ``boxed``: the last ``\\boxed{...}`` / ``\\fbox{...}``, or a later "final answer is
      $...$" statement (math-verify's rule: whichever comes last wins); with neither, the
      whole text through math-verify's other LaTeX anchors (``answer: $...$``).
    * ``answer_line``: the last ``Answer: ...`` (DAPO's prompt: ``Answer: $Answer``), up to
      its line's end, ``$...$``, a trailing period and markdown bold removed: ``**Answer:** 34``,
      ``**Answer: 34**`` and ``Answer: **34**`` all answer 34, as math-verify's own ``answer:``
      anchor reads them (DAPO's grader, which compares strings, scores them 0; it removes
      LaTeX ``\\textbf{}`` but not markdown ``**``).
    * ``any``: whichever of the boxed, statement and ``Answer:`` forms comes last; with
      none, the whole-text search of ``boxed``.
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {', '.join(ANSWER_FORMATS)}, got {answer_format!r}")
    found: list[tuple[int, Answer]] = []
    if answer_format in ("boxed", "any"):
        box = _last_box_span(text)
        if box is not None:
            content = text[box[1] : box[2]]
            found.append((box[0], Answer(f"\\boxed{{{content}}}", content, "boxed")))
        statement = _last_match(_FINAL_STATEMENT, text)
        if statement is not None:
            found.append((statement.start(), Answer(text[statement.start() :], None, "statement")))
    if answer_format in ("answer_line", "any"):
        line = _last_match(_ANSWER_LINE, text)
        if line is not None:
            content = _strip_math_delimiters(line.group(1))
            if content:
                found.append((line.start(), Answer(f"\\boxed{{{content}}}", content, "answer_line")))
    if found:
        return max(found, key=lambda pair: pair[0])[1]
    if answer_format == "answer_line" or not text.strip():
        return None
    return Answer(text, None, "search")


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = None
    for last in pattern.finditer(text):  # noqa: B007  (the loop keeps the last match)
        pass
    return last


def _strip_emphasis(content: str) -> str:
    """``34``, from ``**34**``, ``34**`` (the label's bold closing after the answer),
    ``**34**.`` or ``*34*``: markdown emphasis and a trailing period, in any nesting."""
    while True:
        stripped = _EMPHASIS.sub("", content.strip()).rstrip(".").strip()
        if stripped == content:
            return content
        content = stripped


def _strip_math_delimiters(content: str) -> str:
    content = _strip_emphasis(content)
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if content.startswith(left) and content.endswith(right) and len(content) >= len(left) + len(right):
            return _strip_emphasis(content[len(left) : len(content) - len(right)])
    return content


def _last_box_span(text: str) -> tuple[int, int, int] | None:
    """(start of the command, start and end of the content) of the last balanced box.

    One pass over the braces, so 20,000 unclosed ``\\boxed{`` cost milliseconds (this
    runs in the trainer process, outside any time limit)."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    closing: dict[int, int] = {}
    opened: list[int] = []
    for brace in _BRACE.finditer(text):
        if brace.group() == "{":
            opened.append(brace.start())
        elif opened:
            closing[opened.pop()] = brace.start()
    for box in reversed(list(_BOX_OPEN.finditer(text))):
        end = closing.get(box.end() - 1)
        if end is not None:
            return box.start(), box.end(), end
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, else None."""
    span = _last_box_span(text)
    return None if span is None else text[span[1] : span[2]]


def after_reasoning(text: str, delimiters: tuple[str, ...]) -> str | None:
    """The text after the reasoning (TRL's ``reasoning_accuracy_reward``): after the last
    occurrence of the first delimiter present; None when the reasoning never ends."""
    for delimiter in delimiters:
        if delimiter in text:
            return text.split(delimiter)[-1]
    return None


def is_words(gold: str) -> bool:
    """True for a gold written in words (``forty two``, ``yes``, ``Monday``, ``12 dollars``).

    Such text has no delimiters and would be read by sympy as a product of symbols
    (``yes`` -> E*s*y). A gold made only of words, or one with a run of 3+ letters that is
    no LaTeX command, counts as words; math-verify's units (``5 cm``) are removed before the
    check, and letter pairs inside an expression (``a^2+2ab+b^2``) stay maths.
    """
    text = gold.strip()
    if _WORDS_ONLY.fullmatch(text) and _WORD_RUN.search(text):
        return True
    return any(len(run) >= 3 for run in _WORD_RUN.findall(text))


def integer_verdict(gold_text: str, bare: str | None) -> bool | None:
    """Equality of two plain integers (the gold, bare or in ``$...$``, and the answer)
    without sympy; None when either is anything else. Most MATH/GSM8K answers are integers,
    and math-verify gives the same verdict for them, at a hundredth of the cost."""
    if bare is None:
        return None
    gold, answer = gold_text.strip().strip("$").strip(), bare.strip()
    if not (_INTEGER.fullmatch(gold) and _INTEGER.fullmatch(answer)):
        return None
    return int(gold) == int(answer)


# ---- math-verify (imported by the workers only) ----


@functools.cache
def _answer_config(latex_shorthand: bool) -> list[Any]:
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig

    if latex_shorthand:  # math-verify's default normalisation (shorthand, units, \text, ...)
        return [LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)]
    # TRL's accuracy_reward settings: \frac13 or 2\sqrt3 (valid TeX) stay unnormalised, unparsed.
    return [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(units=True),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]


def parse_gold(gold: str) -> list[Any]:
    """math-verify's parse of a gold answer; [] when no mathematical object comes out of it.

    math-verify falls back to the raw string when LaTeX parsing fails (``\\frac{1}{``); such
    a gold could only be matched by string equality, so it counts as unparseable.
    """
    from math_verify import parse

    text = gold.strip()
    if not text:
        return []
    if not _DELIMITER.search(text):
        parsed = parse(f"${text}$", parsing_timeout=None)
        if is_words(text) and _has_symbols(parsed):
            return []
        if _has_math(parsed):
            return parsed
    parsed = parse(text, parsing_timeout=None)
    return parsed if _has_math(parsed) else []


def _has_math(parsed: list[Any]) -> bool:
    return any(not isinstance(p, str) for p in parsed)


def _has_symbols(parsed: list[Any]) -> bool:
    return any(getattr(p, "free_symbols", None) for p in parsed if not isinstance(p, str))


def parse_answer(target: str, latex_shorthand: bool = True) -> list[Any]:
    """math-verify's parse of an :class:`Answer`'s ``target`` ([] when it holds no answer)."""
    from math_verify import parse

    return parse(
        target,
        extraction_config=_answer_config(latex_shorthand),
        extraction_mode="first_match",
        parsing_timeout=None,
    )


def is_correct(gold: list[Any], answer: list[Any], checker: dict[str, Any] | None = None) -> bool:
    """math-verify's verdict; ``checker`` holds its options (``float_rounding``, ``strict``, ...)."""
    from math_verify import verify

    return bool(answer) and bool(verify(gold, answer, timeout_seconds=None, **(checker or {})))
