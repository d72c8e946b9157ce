"""The test formats the ``code`` reward reads, and how a run's outcome is compared with them.

* stdio: a list of ``{"input": str, "output": str}`` (or ``{"inputs": [...], "outputs": [...]}``,
  or either as JSON text); the program's stdout must equal the output line by line;
* function calls: ``{"type": "function_call", "fn_name": f, "input": [args], "output": [ret]}``
  (DeepCoder / verifiable-coding), ``{"testtype": "functional", "input": "<one JSON argument
  per line>", "output": "<JSON>"}`` (LiveCodeBench; the name comes from the row's
  ``entry_point``), or ``{"fn_name": f, "inputs": [[args]], "outputs": [ret]}`` (APPS/TACO):
  the function's return value must equal the output as JSON data, floats within 1e-6;
* check code: a string of Python defining ``check(candidate)`` (HumanEval);
* assert statements: a list of ``"assert f(1) == 2"`` strings (MBPP's ``test_list``), run as
  the body of a ``check``; the function is the first non-builtin one they call.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FLOAT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class StdioTest:
    input: str
    output: str


@dataclass(frozen=True)
class CallTest:
    """Call ``fn_name(*args)``; ``expected`` is the return value as JSON data."""

    fn_name: str
    args: tuple[Any, ...]
    expected: Any


Tests = list[StdioTest] | list[CallTest] | str


def read_tests(tests: Any, fn_name: str | None = None) -> Tests:
    """The row's tests in one of the formats above; ValueError says what is wrong.

    ``fn_name`` (the row's ``entry_point``) names the function when the tests do not.
    """
    if isinstance(tests, str):
        stripped = tests.lstrip()
        if not stripped.startswith(("[", "{")):
            return tests
        try:
            tests = json.loads(stripped)
        except json.JSONDecodeError:
            return tests  # Python code that happens to start with a bracket
    if _is_assert_list(tests):
        return "def check(candidate):\n" + "".join(f"    {line.strip()}\n" for line in tests)
    if isinstance(tests, dict) and {"inputs", "outputs"} <= set(tests):
        name = tests.get("fn_name") or None
        pairs = zip(tests["inputs"], tests["outputs"], strict=True)
        if name:
            return [CallTest(str(name), _arguments(i), _unwrap_apps(o)) for i, o in pairs]
        tests = [{"input": i, "output": o} for i, o in pairs]
    if isinstance(tests, Sequence) and tests and all(_has(t, "input", "output") for t in tests):
        if all(_is_call(t) for t in tests):
            return [_call_test(t, fn_name) for t in tests]
        if any(_is_call(t) for t in tests):
            raise ValueError("tests mix function-call and stdin/stdout cases")
        return [StdioTest(str(t["input"]), str(t["output"])) for t in tests]
    raise ValueError(f"expected a list of {{'input', 'output'}} or test code, got {str(tests)[:120]!r}")


def _is_assert_list(tests: Any) -> bool:
    return (
        isinstance(tests, list)
        and bool(tests)
        and all(
            isinstance(t, str) and t.strip().startswith("assert") and "\n" not in t.strip() for t in tests
        )
    )


def asserted_function(tests: Any) -> str | None:
    """The function an MBPP-style list of asserts tests: the first non-builtin name called."""
    if isinstance(tests, str) and tests.lstrip().startswith("["):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            return None
    if not _is_assert_list(tests):
        return None
    for line in tests:
        try:
            tree = ast.parse(line.strip())
        except SyntaxError:
            return None
        for node in ast.walk(tree):
            called = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None
            if called and not hasattr(builtins, called):
                return called
    return None


def _has(test: Any, *keys: str) -> bool:
    return isinstance(test, dict) and set(keys) <= set(test)


def _is_call(test: dict[str, Any]) -> bool:
    return test.get("type") == "function_call" or test.get("testtype") == "functional"


def _call_test(test: dict[str, Any], fn_name: str | None) -> CallTest:
    name = test.get("fn_name") or test.get("func_name") or fn_name
    if not name:
        raise ValueError("a function-call test names no function (no fn_name, no entry_point column)")
    expected = test["output"]
    if isinstance(expected, str):
        expected = _json(expected)
    elif test.get("type") == "function_call" and isinstance(expected, list) and len(expected) == 1:
        expected = expected[0]  # DeepCoder wraps the return value in a one-element list
    return CallTest(str(name), _arguments(test["input"]), expected)


def _arguments(given: Any) -> tuple[Any, ...]:
    """A list is the arguments; a string holds one JSON argument per line (LiveCodeBench)."""
    if isinstance(given, str):
        return tuple(_json(line) for line in given.splitlines() if line.strip())
    if isinstance(given, list):
        return tuple(given)
    raise ValueError(f"function-call input must be a list of arguments or JSON lines, got {given!r:.80}")


def _unwrap_apps(output: Any) -> Any:
    return output[0] if isinstance(output, list) and len(output) == 1 else output


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"function-call data is not JSON: {text[:80]!r}") from err


def same_output(actual: str, expected: str) -> bool:
    """Line-by-line equality ignoring trailing whitespace (and trailing blank lines)."""
    return [line.rstrip() for line in actual.rstrip().splitlines()] == [
        line.rstrip() for line in expected.rstrip().splitlines()
    ]


def same_value(actual: Any, expected: Any) -> bool:
    """JSON-data equality: numbers compare as numbers (floats within ``FLOAT_TOLERANCE``,
    relative or absolute), lists (and tuples, which JSON turns into lists) item by item."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(actual, int | float) and isinstance(expected, int | float):
        if isinstance(actual, int) and isinstance(expected, int):
            return actual == expected
        return math.isclose(actual, expected, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
    if isinstance(actual, list) and isinstance(expected, list):
        return len(actual) == len(expected) and all(map(same_value, actual, expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(same_value(actual[k], expected[k]) for k in actual)
    return type(actual) is type(expected) and actual == expected
