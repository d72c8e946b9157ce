"""``math``: 1.0 when the completion's final answer equals the gold answer (math-verify).

Verdicts come from worker processes (see :mod:`rewards.worker_pool`), so the reward is
safe to call from any thread, a batch uses every core, and one pathological answer
costs at most ``timeout`` seconds (plus a 0.5 s kill margin) instead of a stalled step.
Scores: 1.0 correct, 0.0 wrong / no answer / over the time limit, ``None`` when the gold
answer itself does not parse (TRL then ignores the row; one log line names it).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any, ClassVar

from rewards.completions import completion_texts
from rewards.registry import register
from rewards.worker_pool import TIMED_OUT, Chunk, WorkerPool

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
    summary="1.0 if the last \\boxed{} answer equals the gold `solution` (math-verify); None if no gold",
)
class MathReward:
    """See the module docstring. ``workers=0`` means one worker per usable core.

    ``strict_latex=True`` reads answers exactly as TRL's ``accuracy_reward`` does, which
    rejects valid TeX shorthand (``\\frac13``, ``2\\sqrt3``); the default accepts it.
    """

    # One pool per (time limit, size) per process, shared by every math-based reward
    # (``math`` and ``cosine`` in one recipe would otherwise start two pools on the same cores).
    _pools: ClassVar[dict[tuple[float, int], WorkerPool]] = {}
    _pools_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, timeout: float = 5.0, workers: int = 0, strict_latex: bool = False) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if workers < 0:
            raise ValueError(f"workers must be >= 0 (0 = one per core), got {workers}")
        self.timeout, self.workers = float(timeout), workers or usable_cores()
        self.strict_latex = strict_latex
        self.gold_parses = 0  # gold answers actually parsed (not cache hits): one per prompt
        self.__name__ = "math"

    @property
    def pool(self) -> WorkerPool:
        key = (self.timeout, self.workers)
        with self._pools_lock:
            if key not in self._pools:
                self._pools[key] = WorkerPool("rewards._math_worker", self.workers, self.timeout)
            return self._pools[key]

    def __call__(
        self,
        completions: list[Any],
        solution: list[str],
        log_extra: Callable[[str, list[Any]], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        texts = completion_texts(completions)
        if len(solution) != len(texts):
            raise ValueError(f"math: got {len(solution)} solutions for {len(texts)} completions")
        scores, answers, golds = self.judge(texts, [str(s) for s in solution])
        if log_extra is not None:
            log_extra("gold_parsed", golds)
            log_extra("answer_parsed", answers)
        return scores

    def judge(
        self, texts: list[str], solutions: list[str]
    ) -> tuple[list[float | None], list[str], list[str]]:
        """Scores, parsed answers and parsed golds (as short strings) for aligned lists."""
        rows_by_gold: dict[str, list[int]] = defaultdict(list)
        for row, gold in enumerate(solutions):
            rows_by_gold[gold].append(row)
        groups = list(rows_by_gold.values())
        chunks = [Chunk(solutions[rows[0]], [(texts[r], self.strict_latex) for r in rows]) for rows in groups]
        self.pool.run(chunks)
        scores: list[float | None] = [None] * len(texts)
        answers, golds = [""] * len(texts), [""] * len(texts)
        timed_out: list[int] = []
        for rows, chunk in zip(groups, chunks, strict=True):
            head = chunk.head_reply
            if head == TIMED_OUT or not head["ok"]:
                why = (
                    "timed out"
                    if head == TIMED_OUT
                    else f"does not parse ({head['error'] or 'no answer found'})"
                )
                log.warning("math: gold answer of row %d, %r, %s; its %d completion(s) score None",
                            rows[0], chunk.head[:200], why, len(rows))  # fmt: skip
                continue
            self.gold_parses += sum(int(r != TIMED_OUT and r["fresh"]) for r in chunk.head_replies)
            for row, reply in zip(rows, chunk.item_replies, strict=True):
                golds[row] = head["parsed"]
                if reply == TIMED_OUT:
                    timed_out.append(row)
                    scores[row], answers[row] = 0.0, "[killed: over time limit]"
                else:
                    scores[row], answers[row] = reply["score"], reply["answer"]
        if timed_out:
            log.warning(
                "math: completion(s) of row(s) %s ran past %.1fs and score 0.0", timed_out, self.timeout
            )
        return scores, answers, golds
