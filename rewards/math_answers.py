"""Parsing gold answers and completions for the ``math`` reward (runs inside its workers).

Three choices differ from TRL's ``accuracy_reward``, all on purpose:

* Gold answers as datasets store them (``x^2+2x+1``, ``(1,3]``, ``2\\sqrt{3}``) carry no
  ``$...$``, and math-verify's default extraction then finds nothing (TRL returns None) or
  a fragment (``2\\sqrt{3}`` parses as ``2``). A gold without any LaTeX delimiter is
  therefore wrapped in ``$...$`` first; golds that have delimiters parse exactly as in TRL.
* A completion's answer is its *last* ``\\boxed{...}``, the model's final word; without a
  box the whole text goes through math-verify with TRL's extraction order (boxed first,
  then other LaTeX anchors).
* Answers get math-verify's full LaTeX normalisation, so valid TeX shorthand such as
  ``\\frac13`` or ``2\\sqrt3`` parses; TRL's settings leave it unparsed and score it wrong.
  ``strict_latex=True`` restores TRL's reading exactly (the benchmark checks that it gives
  TRL's verdicts item for item).

Time limits are not math-verify's SIGALRM (which raises outside the main thread) but
the worker's own interval timer plus a hard kill by the parent pool.
"""

from __future__ import annotations

import re
from typing import Any

from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify

# TRL's accuracy_reward settings: LaTeX shorthand such as \frac13 or 2\sqrt3 (valid TeX) is
# left unnormalised and so fails to parse. Used with strict_latex=True.
STRICT_ANSWER_CONFIG = [
    LatexExtractionConfig(
        normalization_config=NormalizationConfig(units=True),
        boxed_match_priority=0,
        try_extract_without_anchor=False,
    )
]
# math-verify's default normalisation (shorthand, units, \text, ...), same extraction order.
ANSWER_CONFIG = [LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)]
_DELIMITER = re.compile(r"(?<!\\)\$|\\\(|\\\[|\\boxed")  # an unescaped $, \( \[ or \boxed
_BOX_COMMANDS = ("\\boxed", "\\fbox")


def parse_gold(gold: str) -> list[Any]:
    """math-verify's parse of a gold answer; [] when no mathematical object comes out of it.

    math-verify falls back to the raw string when LaTeX parsing fails (``\\frac{1}{``); such
    a gold could only be matched by string equality, so it counts as unparseable.
    """
    text = gold.strip()
    if not text:
        return []
    if not _DELIMITER.search(text):
        parsed = parse(f"${text}$", parsing_timeout=None)
        if _has_math(parsed):
            return parsed
    parsed = parse(text, parsing_timeout=None)
    return parsed if _has_math(parsed) else []


def _has_math(parsed: list[Any]) -> bool:
    return any(not isinstance(p, str) for p in parsed)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, else None."""
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    while start != -1:
        i = text.find("{", start)
        if i != -1 and text[start:i].rstrip() in _BOX_COMMANDS:
            depth = 0
            for j in range(i, len(text)):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1 : j]
        start = max(text.rfind(cmd, 0, start) for cmd in _BOX_COMMANDS)
    return None


def parse_answer(text: str, strict_latex: bool = False) -> list[Any]:
    """math-verify's parse of a completion's final answer ([] when there is none)."""
    boxed = last_boxed(text)
    target = f"\\boxed{{{boxed}}}" if boxed is not None else text
    config = STRICT_ANSWER_CONFIG if strict_latex else ANSWER_CONFIG
    return parse(target, extraction_config=config, extraction_mode="first_match", parsing_timeout=None)


_INTEGER = re.compile(r"-?\d{1,30}")


def integer_verdict(gold_text: str, boxed: str | None) -> bool | None:
    """Equality of two plain integers (the gold, bare or in ``$...$``, and the boxed answer)
    without sympy; None when either is anything else. Most MATH/GSM8K answers are integers,
    and math-verify gives the same verdict for them, at a hundredth of the cost."""
    if boxed is None:
        return None
    gold, answer = gold_text.strip().strip("$").strip(), boxed.strip()
    if not (_INTEGER.fullmatch(gold) and _INTEGER.fullmatch(answer)):
        return None
    return int(gold) == int(answer)


def is_correct(gold: list[Any], answer: list[Any]) -> bool:
    return bool(answer) and bool(verify(gold, answer, timeout_seconds=None))
