"""``code``: run the completion's last fenced Python block against the row's tests, for real.

The row's ``tests`` column is stdio cases, function-call cases or check code (formats in
:mod:`gspo_trl.rewards.code_tests`); check code and LiveCodeBench-style calls use the row's
``entry_point`` column for the function's name.

The verdict is the harness's and the parent's, never the program's exit status alone: an
early exit, a printed "all tests passed", a redefined ``check`` or an object that claims
to equal everything scores 0. Score: fraction of cases passed (``scoring="binary"``: 1.0
only if all pass, and the first failure stops the row); 1.0/0.0 for check code; None when
the row's tests cannot be read (logged). Each completion gets ``timeout`` per run and
``total_timeout`` for all its runs. Every run goes through :mod:`gspo_trl.rewards.execution.sandbox`,
``max_workers`` completions at a time; nothing a completion does makes the call raise.
"""

from __future__ import annotations

import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from gspo_trl.rewards.code_tests import (
    CallTest,
    StdioTest,
    asserted_function,
    read_tests,
    same_output,
    same_value,
)
from gspo_trl.rewards.completions import completion_texts
from gspo_trl.rewards.execution import sandbox as sandboxing
from gspo_trl.rewards.math_verify_reward import usable_cores
from gspo_trl.rewards.registry import register

__all__ = ["CodeReward", "last_code_block", "rank_share_of_cores"]
log = logging.getLogger(__name__)
_PYTHON_TAGS = ("", "python", "py", "python3", "py3")
_TAG = re.compile(r"[ \t]*([\w+#.-]*)")
MAX_COMPLETION_CHARS = 256_000  # ~64k tokens; longer completions are not parsed and score 0


def last_code_block(text: str) -> str | None:
    """The last fenced block tagged python (or untagged); None when there is none.

    One left-to-right pass with ``str.find`` (a regex with a lazy body retried at every
    backtick is quadratic: 17 s on 96k backticks).
    """
    last, pos = None, 0
    while (start := text.find("```", pos)) != -1:
        newline = text.find("\n", start + 3)
        end = text.find("```", newline + 1) if newline != -1 else -1
        if end == -1:
            break
        tag = _TAG.match(text, start + 3, newline).group(1)
        if tag.lower() in _PYTHON_TAGS:
            last = text[newline + 1 : end]
        pos = end + 3
    return last


def rank_share_of_cores() -> int:
    """This training process's share of the node's cores: torchrun and accelerate set
    LOCAL_WORLD_SIZE to the processes per node; at least 1."""
    return max(1, usable_cores() // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)))


@dataclass(frozen=True)
class _Row:
    index: int
    program: str
    cases: list[StdioTest] | list[CallTest] | str
    entry_point: str | None


@register(
    "code",
    factory=True,
    columns=("tests",),
    summary="fraction of the row's `tests` (stdio, function calls, or check() code + `entry_point`) passed",
)
class CodeReward:
    """See the module docstring. ``timeout``: seconds per run; ``total_timeout``: seconds for
    all runs of one completion (default 3 x ``timeout``); ``sandbox``: ``bwrap``, or the
    weaker ``rlimit`` fallback only by explicit choice (``docs/rewards.md``)."""

    def __init__(
        self,
        scoring: str = "fraction",
        timeout: float = 10.0,
        total_timeout: float = 0.0,
        memory_mb: int = 512,
        max_workers: int = 0,
        sandbox: str = "bwrap",
    ) -> None:
        if scoring not in ("fraction", "binary"):
            raise ValueError(f"scoring must be 'fraction' or 'binary', got {scoring!r}")
        if timeout <= 0 or memory_mb < 64 or total_timeout < 0:
            raise ValueError(f"need timeout > 0, total_timeout >= 0, memory_mb >= 64, got {timeout}, "
                             f"{total_timeout}, {memory_mb}")  # fmt: skip
        self.scoring = scoring
        self.sandbox_mode = sandboxing.resolve_mode(sandbox)  # refuses now, not mid-training
        self.limits = replace(
            sandboxing.Limits(), wall_s=timeout, cpu_s=max(1, int(timeout)), memory_mb=memory_mb
        )
        self.total_timeout = total_timeout or 3 * timeout
        self.max_workers = max_workers or rank_share_of_cores()
        self.__name__ = "code"

    def __call__(
        self, completions: list[Any], tests: list[Any], entry_point: list[str] | None = None, **kwargs: Any
    ) -> list[float | None]:
        texts = completion_texts(completions)
        if len(tests) != len(texts):
            raise ValueError(f"code: got {len(tests)} tests for {len(texts)} completions")
        scores: list[float | None] = [0.0] * len(texts)
        rows = []
        for index, (text, row_tests) in enumerate(zip(texts, tests, strict=True)):
            name = (entry_point[index] if entry_point is not None else None) or asserted_function(row_tests)
            try:
                cases = read_tests(row_tests, name)
            except ValueError as err:
                log.warning("code: tests of row %d cannot be read (%s); it scores None", index, err)
                scores[index] = None
                continue
            if isinstance(cases, str) and not name:
                log.warning("code: row %d has check-style tests but no entry_point; it scores None", index)
                scores[index] = None
                continue
            program = last_code_block(text) if len(text) <= MAX_COMPLETION_CHARS else None
            if program is not None:
                rows.append(_Row(index, program, cases, name))
        with ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="code-reward") as pool:
            for row, score in zip(rows, pool.map(self._score, rows), strict=True):
                scores[row.index] = score
        return scores

    def _score(self, row: _Row) -> float:
        """Run the row's cases one after another within its time budget."""
        if isinstance(row.cases, str):
            jobs = [
                (
                    {
                        "kind": "check",
                        "solution": row.program,
                        "tests": row.cases,
                        "entry_point": row.entry_point,
                    },
                    None,
                )
            ]
        else:
            jobs = [(self._job(row.program, case), case) for case in row.cases]
        deadline, passed = time.monotonic() + self.total_timeout, 0
        for job, case in jobs:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                ok = self._passes(job, case, replace(self.limits, wall_s=min(self.limits.wall_s, remaining)))
            except Exception as err:  # the sandbox itself failed: this run fails, the call goes on
                log.warning("code: a run of row %d failed in the sandbox (%s: %s); it counts as failed",
                            row.index, type(err).__name__, err)  # fmt: skip
                ok = False
            passed += ok
            if not ok and self.scoring == "binary":
                break
        fraction = passed / len(jobs)
        return fraction if self.scoring == "fraction" else float(fraction == 1.0)

    @staticmethod
    def _job(program: str, case: StdioTest | CallTest) -> dict[str, Any]:
        if isinstance(case, CallTest):
            return {"kind": "call", "solution": program, "fn_name": case.fn_name, "args": list(case.args)}
        return {"kind": "stdio", "solution": program}

    def _passes(self, job: dict[str, Any], case: StdioTest | CallTest | None, limits: Any) -> bool:
        stdin = case.input.encode() if isinstance(case, StdioTest) else b""
        result = sandboxing.run(job, stdin=stdin, limits=limits, mode=self.sandbox_mode)
        if result.timed_out or result.output_capped:
            return False
        if isinstance(case, StdioTest):
            return result.returncode == 0 and same_output(result.stdout.decode(errors="replace"), case.output)
        if not (result.verdict and result.verdict.get("passed") is True):
            return False
        return case is None or same_value(result.verdict.get("value"), case.expected)
