"""``math``: 1.0 when the completion's final answer equals the gold answer (math-verify).

Verdicts come from worker processes (see :mod:`gspo_trl.rewards.worker_pool`), so the reward is
safe to call from any thread, a batch uses every core, and one pathological answer
costs at most ``timeout`` seconds (plus a 0.5 s kill margin) instead of a stalled step.
Within one call each distinct (gold, answer) pair is judged once: the 8 identical
completions of a group that box the same power tower cost one time limit, not eight.
Scores: 1.0 correct, 0.0 wrong / no answer / over the time limit / reasoning never
finished, ``None`` when the gold answer is missing or does not parse (TRL then ignores
the row; one log line names it).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from gspo_trl.rewards.completions import completion_texts
from gspo_trl.rewards.math_answers import ANSWER_FORMATS, after_reasoning, find_answer
from gspo_trl.rewards.registry import register
from gspo_trl.rewards.worker_pool import TIMED_OUT, Chunk, WorkerPool

log = logging.getLogger(__name__)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@register(
    "math",
    factory=True,
    columns=("solution",),
    aliases=("accuracy",),
    renamed={"strict_latex": ("latex_shorthand", lambda strict: not strict)},
    summary="1.0 if the final answer equals the gold `solution` (math-verify); None if no gold",
)
class MathReward:
    """See the module docstring. ``workers=0`` means one worker per usable core.

    ``answer_format`` says where the answer is (``boxed``, ``answer_line``, ``any``; see
    :func:`gspo_trl.rewards.math_answers.find_answer`). ``reasoning_delimiters`` (e.g.
    ``["</think>"]``) grade only the text after the reasoning, and give 0.0 when it never
    ends. ``latex_shorthand=False`` reads answers exactly as TRL's ``accuracy_reward``
    does, rejecting valid TeX shorthand (``\\frac13``). ``float_rounding``,
    ``numeric_precision``, ``strict`` and ``allow_set_relation_comp`` are math-verify's
    ``verify`` options, passed through unchanged.
    """

    # One pool per (time limit, size) per process, shared by every math-based reward
    # (``math`` and ``cosine`` in one recipe would otherwise start two pools on the same cores).
    _pools: ClassVar[dict[tuple[float, int], WorkerPool]] = {}
    _pools_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        timeout: float = 5.0,
        workers: int = 0,
        answer_format: str = "boxed",
        reasoning_delimiters: list[str] | None = None,
        latex_shorthand: bool = True,
        float_rounding: int = 6,
        numeric_precision: int = 15,
        strict: bool = True,
        allow_set_relation_comp: bool = False,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if workers < 0:
            raise ValueError(f"workers must be >= 0 (0 = one per core), got {workers}")
        if answer_format not in ANSWER_FORMATS:
            raise ValueError(
                f"answer_format must be one of {', '.join(ANSWER_FORMATS)}, got {answer_format!r}"
            )
        if reasoning_delimiters is not None and (
            isinstance(reasoning_delimiters, str)
            or not all(isinstance(d, str) and d for d in reasoning_delimiters)
        ):
            raise ValueError(
                f"reasoning_delimiters must be a list of non-empty strings, got {reasoning_delimiters!r}"
            )
        if float_rounding < 0 or numeric_precision <= 0:
            raise ValueError(
                "float_rounding must be >= 0 and numeric_precision > 0, "
                f"got {float_rounding} and {numeric_precision}"
            )
        self.timeout, self.workers = float(timeout), workers or usable_cores()
        self.answer_format = answer_format
        self.reasoning_delimiters = None if reasoning_delimiters is None else tuple(reasoning_delimiters)
        self.latex_shorthand = latex_shorthand
        self.checker = {
            "float_rounding": float_rounding,
            "numeric_precision": numeric_precision,
            "strict": strict,
            "allow_set_relation_comp": allow_set_relation_comp,
        }
        self.gold_parses = 0  # gold answers actually parsed (not cache hits): one per prompt
        self.__name__ = "math"

    @property
    def pool(self) -> WorkerPool:
        key = (self.timeout, self.workers)
        with self._pools_lock:
            if key not in self._pools:
                self._pools[key] = WorkerPool("gspo_trl.rewards._math_worker", self.workers, self.timeout)
            return self._pools[key]

    def __call__(
        self,
        completions: list[Any],
        solution: Sequence[Any],
        log_extra: Callable[[str, list[Any]], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        texts = completion_texts(completions)
        if len(solution) != len(texts):
            raise ValueError(f"math: got {len(solution)} solutions for {len(texts)} completions")
        golds = [None if s is None else str(s) for s in solution]
        scores, answers, parsed_golds = self.judge(texts, golds)
        if log_extra is not None:
            log_extra("gold_parsed", parsed_golds)
            log_extra("answer_parsed", answers)
        return scores

    def judge(
        self, texts: list[str], solutions: list[str | None]
    ) -> tuple[list[float | None], list[str], list[str]]:
        """Scores, parsed answers and parsed golds (as short strings) for aligned lists.

        A None gold scores None. Rows are grouped by gold, and within a gold by answer,
        so each distinct (gold, answer) pair is sent to a worker once per call.
        """
        scores: list[float | None] = [None] * len(texts)
        answers, golds = [""] * len(texts), [""] * len(texts)
        # gold -> answer key -> rows; an answer's key is what the worker needs to judge it
        by_gold: dict[str, dict[tuple[str, str | None], list[int]]] = {}
        unfinished: set[int] = set()
        for row, (text, gold) in enumerate(zip(texts, solutions, strict=True)):
            if gold is None:
                answers[row] = "[no gold answer]"
                continue
            if self.reasoning_delimiters is not None:
                text = after_reasoning(text, self.reasoning_delimiters)
                if text is None:
                    unfinished.add(row)
                    text = ""
            answer = find_answer(text, self.answer_format)
            key = ("", None) if answer is None else (answer.target, answer.bare)
            by_gold.setdefault(gold, {}).setdefault(key, []).append(row)
        chunks = [
            Chunk(gold, [self._item(target, bare) for target, bare in keyed])
            for gold, keyed in by_gold.items()
        ]
        self.pool.run(chunks)
        timed_out: list[int] = []
        for (gold, keyed), chunk in zip(by_gold.items(), chunks, strict=True):
            head = chunk.head_reply
            if head == TIMED_OUT or not head["ok"]:
                rows = [r for group in keyed.values() for r in group]
                why = (
                    "timed out"
                    if head == TIMED_OUT
                    else f"does not parse ({head['error'] or 'no answer found'})"
                )
                log.warning("math: gold answer of row %d, %r, %s; its %d completion(s) score None",
                            min(rows), gold[:200], why, len(rows))  # fmt: skip
                continue
            self.gold_parses += sum(int(r != TIMED_OUT and r["fresh"]) for r in chunk.head_replies)
            for rows, reply in zip(keyed.values(), chunk.item_replies, strict=True):
                for row in rows:
                    golds[row] = head["parsed"]
                    if row in unfinished:
                        scores[row], answers[row] = 0.0, "[reasoning not finished]"
                    elif reply == TIMED_OUT:
                        timed_out.append(row)
                        scores[row], answers[row] = 0.0, "[killed: over time limit]"
                    else:
                        scores[row], answers[row] = reply["score"], reply["answer"]
        if timed_out:
            log.warning(
                "math: completion(s) of row(s) %s ran past %.1fs and score 0.0",
                sorted(timed_out),
                self.timeout,
            )
        return scores, answers, golds

    def _item(self, target: str, bare: str | None) -> dict[str, Any]:
        return {
            "target": target,
            "bare": bare,
            "latex_shorthand": self.latex_shorthand,
            "checker": self.checker,
        }
