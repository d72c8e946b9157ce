"""``code``: run the completion's last fenced Python block against the row's tests, for real.

The row's ``tests`` column is either

* a list of ``{"input": str, "output": str}`` (or a dict of ``inputs``/``outputs`` lists,
  or either as a JSON string): the program reads stdin; its stdout must equal the expected
  output line by line, trailing whitespace ignored, with exit status 0; or
* a string of Python test code defining ``check(candidate)`` (HumanEval style), run after
  the solution on the function the row's ``entry_point`` column names.

The verdict is the harness's and the parent's, never the program's exit status alone: an
early exit, a printed "all tests passed", a redefined ``check`` or an object that claims
to equal everything scores 0. Score: fraction of stdio tests passed (``scoring="binary"``:
1.0 only if all pass); 1.0/0.0 for check-style tests; None when the row's tests cannot be
read (logged). Every run goes through :mod:`rewards.execution.sandbox`, ``max_workers`` at a time.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from rewards.completions import completion_texts
from rewards.execution import sandbox
from rewards.math_verify_reward import usable_cores
from rewards.registry import register

log = logging.getLogger(__name__)
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = ("", "python", "py", "python3", "py3")


@dataclass(frozen=True)
class StdioTest:
    input: str
    output: str


def last_code_block(text: str) -> str | None:
    """The last fenced block tagged python (or untagged); None when there is none."""
    blocks = [body for tag, body in _FENCE.findall(text) if tag.lower() in _PYTHON_TAGS]
    return blocks[-1] if blocks else None


def read_tests(tests: Any) -> list[StdioTest] | str:
    """The row's tests as stdio cases or as check-style code; ValueError says what is wrong."""
    if isinstance(tests, str):
        stripped = tests.lstrip()
        if not stripped.startswith(("[", "{")):
            return tests
        try:
            tests = json.loads(stripped)
        except json.JSONDecodeError:
            return tests  # Python code that happens to start with a bracket
    if isinstance(tests, dict) and {"inputs", "outputs"} <= set(tests):
        tests = [{"input": i, "output": o} for i, o in zip(tests["inputs"], tests["outputs"], strict=True)]
    if (
        isinstance(tests, Sequence)
        and tests
        and all(isinstance(t, dict) and {"input", "output"} <= set(t) for t in tests)
    ):
        return [StdioTest(str(t["input"]), str(t["output"])) for t in tests]
    raise ValueError(f"expected a list of {{'input', 'output'}} or test code, got {str(tests)[:120]!r}")


def same_output(actual: str, expected: str) -> bool:
    """Line-by-line equality ignoring trailing whitespace (and trailing blank lines)."""
    return [line.rstrip() for line in actual.rstrip().splitlines()] == [
        line.rstrip() for line in expected.rstrip().splitlines()
    ]


@register(
    "code",
    factory=True,
    columns=("tests",),
    summary="fraction of the row's `tests` (stdio cases, or check() code + `entry_point`) the code passes",
)
class CodeReward:
    """See the module docstring. ``timeout`` is the wall-clock limit of one test run in seconds."""

    def __init__(
        self,
        scoring: str = "fraction",
        timeout: float = 10.0,
        memory_mb: int = 512,
        max_workers: int = 0,
        sandbox_mode: str = "auto",
    ) -> None:
        if scoring not in ("fraction", "binary"):
            raise ValueError(f"scoring must be 'fraction' or 'binary', got {scoring!r}")
        if timeout <= 0 or memory_mb < 64:
            raise ValueError(f"need timeout > 0 and memory_mb >= 64, got {timeout}, {memory_mb}")
        if sandbox_mode not in sandbox.MODES:
            raise ValueError(f"sandbox_mode must be one of {sandbox.MODES}, got {sandbox_mode!r}")
        self.scoring, self.sandbox_mode = scoring, sandbox_mode
        self.limits = replace(
            sandbox.Limits(), wall_s=timeout, cpu_s=max(1, int(timeout)), memory_mb=memory_mb
        )
        self.max_workers = max_workers or usable_cores()
        self.__name__ = "code"

    def __call__(
        self, completions: list[Any], tests: list[Any], entry_point: list[str] | None = None, **kwargs: Any
    ) -> list[float | None]:
        texts = completion_texts(completions)
        if len(tests) != len(texts):
            raise ValueError(f"code: got {len(tests)} tests for {len(texts)} completions")
        runs: list[tuple[int, dict[str, Any], StdioTest | None]] = []
        scores: list[float | None] = [0.0] * len(texts)
        totals = [0] * len(texts)
        for row, (text, row_tests) in enumerate(zip(texts, tests, strict=True)):
            program = last_code_block(text)
            try:
                parsed = read_tests(row_tests)
            except ValueError as err:
                log.warning("code: tests of row %d cannot be read (%s); it scores None", row, err)
                scores[row] = None
                continue
            if program is None:
                continue
            if isinstance(parsed, str):
                name = entry_point[row] if entry_point is not None else None
                if not name:
                    log.warning("code: row %d has check-style tests but no entry_point; it scores None", row)
                    scores[row] = None
                    continue
                runs.append(
                    (row, {"kind": "check", "solution": program, "tests": parsed, "entry_point": name}, None)
                )
                totals[row] = 1
            else:
                runs += [(row, {"kind": "stdio", "solution": program}, case) for case in parsed]
                totals[row] = len(parsed)
        passed = [0] * len(texts)
        with ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="code-reward") as pool:
            for row, ok in pool.map(lambda r: (r[0], self._passes(r[1], r[2])), runs):
                passed[row] += ok
        for row, total in enumerate(totals):
            if scores[row] is not None and total:
                fraction = passed[row] / total
                scores[row] = fraction if self.scoring == "fraction" else float(fraction == 1.0)
        return scores

    def _passes(self, job: dict[str, Any], case: StdioTest | None) -> bool:
        stdin = case.input.encode() if case is not None else b""
        result = sandbox.run(job, stdin=stdin, limits=self.limits, mode=self.sandbox_mode)
        if result.timed_out or result.output_capped:
            return False
        if case is None:
            return bool(result.verdict and result.verdict.get("passed") is True)
        return result.returncode == 0 and same_output(result.stdout.decode(errors="replace"), case.output)
