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


@dataclass
class _RunCount:
    """One completion's runs, and how many failed for the sandbox's reasons or the clock's."""

    runs: int = 0
    sandbox_faults: int = 0
    timeouts: int = 0


TIMEOUT_ALARM_SHARE = 0.5  # of a batch's runs (at least 8), see ``_alarm``


def _alarm(counts: list[_RunCount], completions: int) -> None:
    """Warn about a batch of zeros the completions did not earn.

    A sandbox fault is never the completion's doing (its code never ran, or the server was
    lost), and half a batch timing out is the signature of a starved sandbox: a fork server
    reniced or set to ``SCHED_IDLE`` by a job once turned every later job of a busy cpu cgroup
    into a timeout. Both cost the honest completions their reward silently, so they are named.
    """
    runs = sum(c.runs for c in counts)
    faults, timeouts = sum(c.sandbox_faults for c in counts), sum(c.timeouts for c in counts)
    if faults:
        log.warning(
            "code: %d of %d runs in this batch of %d completions failed in the sandbox, not in the "
            "completion's code (scored 0; see the sandbox warnings): a completion may be tampering "
            "with the sandbox, or the machine is out of processes or memory",
            faults, runs, completions,
        )  # fmt: skip
    if runs >= 8 and timeouts > TIMEOUT_ALARM_SHARE * runs:
        log.warning(
            "code: %d of %d runs in this batch of %d completions timed out: unless these programs "
            "are slow by nature, the sandbox is starved of CPU (a busy cpu cgroup, or a lowered "
            "priority); raise `timeout` or give the reward more cores",
            timeouts, runs, completions,
        )  # fmt: skip


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
        faults: list[_RunCount] = []
        with ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="code-reward") as pool:
            for row, (score, count) in zip(rows, pool.map(self._score, rows), strict=True):
                scores[row.index] = score
                faults.append(count)
        _alarm(faults, len(texts))
        return scores

    def _score(self, row: _Row) -> tuple[float, _RunCount]:
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
        deadline, passed, count = time.monotonic() + self.total_timeout, 0, _RunCount()
        for job, case in jobs:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            count.runs += 1
            try:
                limits = replace(self.limits, wall_s=min(self.limits.wall_s, remaining))
                ok = self._passes(job, case, limits, count)
            except Exception as err:  # the sandbox itself failed: this run fails, the call goes on
                log.warning("code: a run of row %d failed in the sandbox (%s: %s); it counts as failed",
                            row.index, type(err).__name__, err)  # fmt: skip
                ok, count.sandbox_faults = False, count.sandbox_faults + 1
            passed += ok
            if not ok and self.scoring == "binary":
                break
        fraction = passed / len(jobs)
        return (fraction if self.scoring == "fraction" else float(fraction == 1.0)), count

    @staticmethod
    def _job(program: str, case: StdioTest | CallTest) -> dict[str, Any]:
        if isinstance(case, CallTest):
            return {"kind": "call", "solution": program, "fn_name": case.fn_name, "args": list(case.args)}
        return {"kind": "stdio", "solution": program}

    def _passes(
        self, job: dict[str, Any], case: StdioTest | CallTest | None, limits: Any, count: _RunCount
    ) -> bool:
        stdin = case.input.encode() if isinstance(case, StdioTest) else b""
        result = sandboxing.run(job, stdin=stdin, limits=limits, mode=self.sandbox_mode)
        count.sandbox_faults += result.sandbox_fault
        count.timeouts += result.timed_out and not result.sandbox_fault
        if result.timed_out or result.output_capped:
            return False
        if isinstance(case, StdioTest):
            return result.returncode == 0 and same_output(result.stdout.decode(errors="replace"), case.output)
        if not (result.verdict and result.verdict.get("passed") is True):
            return False
        return case is None or same_value(result.verdict.get("value"), case.expected)
