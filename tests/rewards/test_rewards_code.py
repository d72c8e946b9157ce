"""The ``code`` reward's plumbing: code extraction, test formats, scoring modes, sandbox selection."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gspo_trl import rewards
from gspo_trl.rewards.code import last_code_block, rank_share_of_cores
from gspo_trl.rewards.code_tests import CallTest, StdioTest, read_tests, same_output, same_value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```py\na\n```\ntext\n```python\nb\n```", "b\n"),
        ("```python\nfirst\n```\n```bash\nls\n```", "first\n"),
        ("```python3 title=sol.py\nz\n```", "z\n"),
        ("no code here", None),
        ("```python\nunterminated", None),
        ("", None),
        ("```python\nprint('héllo ✓')\n```", "print('héllo ✓')\n"),
    ],
)
def test_last_code_block(text, expected):
    assert last_code_block(text) == expected


@pytest.mark.parametrize(
    ("tests", "expected"),
    [
        ([{"input": "1", "output": "2"}], [StdioTest("1", "2")]),
        (json.dumps([{"input": "1", "output": "2"}]), [StdioTest("1", "2")]),
        ({"inputs": ["a", "b"], "outputs": ["c", "d"]}, [StdioTest("a", "c"), StdioTest("b", "d")]),
        (
            "def check(candidate):\n    assert candidate() == 1\n",
            "def check(candidate):\n    assert candidate() == 1\n",
        ),
    ],
)
def test_read_tests(tests, expected):
    assert read_tests(tests) == expected


@pytest.mark.parametrize("tests", [[], [{"input": "1"}], 42, {"inputs": ["a"]}])
def test_read_tests_rejects(tests):
    with pytest.raises(ValueError):
        read_tests(tests)


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ("1 2 \n3\n\n", "1 2\n3", True),
        ("1\n2", "1 2", False),
        ("", "", True),
        ("a", "A", False),
        ("x\r\n", "x", True),
    ],
)
def test_same_output(actual, expected, same):
    assert same_output(actual, expected) is same


SQUARE = [
    {"input": "2\n", "output": "4\n"},
    {"input": "3\n", "output": "9\n"},
    {"input": "-1\n", "output": "1\n"},
]


def test_scores_plain_and_chat_fraction_and_binary():
    right = "```python\nn = int(input())\nprint(n * n)\n```"
    partial = "```python\nn = int(input())\nprint(n * n if n > 0 else 0)\n```"
    completions = [right, [{"role": "assistant", "content": partial}], "no code", ""]
    tests = [SQUARE] * 4
    assert rewards.get("code")(completions, tests=tests) == [1.0, pytest.approx(2 / 3), 0.0, 0.0]
    assert rewards.get("code", scoring="binary")(completions, tests=tests) == [1.0, 0.0, 0.0, 0.0]


def test_unreadable_tests_score_none_and_check_needs_entry_point(caplog):
    fn = rewards.get("code")
    code = "```python\ndef f():\n    return 1\n```"
    assert fn([code, code], tests=[42, "def check(c):\n    assert c() == 1\n"]) == [None, None]
    assert "row 0" in caplog.text and "row 1" in caplog.text
    assert fn([code], tests=["def check(c):\n    assert c() == 1\n"], entry_point=["f"]) == [1.0]


def test_without_bwrap_refuses_unless_rlimit_is_chosen():
    """No bwrap: the default refuses, naming the fix; `sandbox="rlimit"` scores, warning once."""
    script = (
        "import logging\nfrom gspo_trl import rewards\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "try:\n    rewards.get('code')\nexcept RuntimeError as err:\n    print('refused:', err)\n"
        "fn = rewards.get('code', sandbox='rlimit')\n"
        f"print(fn(['```python\\nprint(int(input()) ** 2)\\n```'] * 2, tests=[{SQUARE!r}] * 2))\n"
        "rewards.get('code', sandbox='rlimit')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GSPO_TRL_SANDBOX"}
    env["PATH"] = os.path.dirname(sys.executable)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    refusal, scores = done.stdout.splitlines()
    assert "apt-get install bubblewrap" in refusal and "sandbox: rlimit" in refusal
    assert scores == "[1.0, 1.0]"
    assert done.stderr.count("does NOT hide the file system") == 1


def test_env_var_forces_fallback(monkeypatch):
    from gspo_trl.rewards.execution import sandbox

    monkeypatch.setenv("GSPO_TRL_SANDBOX", "rlimit")
    assert sandbox.resolve_mode("bwrap") == "rlimit"
    result = sandbox.run({"kind": "stdio", "solution": "print(1)"})
    assert result.mode == "rlimit" and result.stdout == b"1\n"
    monkeypatch.setenv("GSPO_TRL_SANDBOX", "nonsense")
    with pytest.raises(ValueError, match="nonsense"):
        sandbox.resolve_mode("bwrap")


CALL_FORMATS = [
    (  # DeepCoder / verifiable-coding: return value wrapped in a one-element list
        [{"type": "function_call", "fn_name": "total", "input": [[1, 2, 3]], "output": [6]}],
        None,
        [CallTest("total", ([1, 2, 3],), 6)],
    ),
    (  # LiveCodeBench: one JSON argument per line, the name from entry_point
        json.dumps([{"input": "[1, 2, 3]\n2", "output": "12", "testtype": "functional"}]),
        "scaled",
        [CallTest("scaled", ([1, 2, 3], 2), 12)],
    ),
    (  # APPS / TACO
        {"fn_name": "total", "inputs": [[[4, 5]]], "outputs": [[9]]},
        None,
        [CallTest("total", ([4, 5],), 9)],
    ),
]


@pytest.mark.parametrize(("tests", "entry_point", "expected"), CALL_FORMATS)
def test_read_function_call_tests(tests, entry_point, expected):
    assert read_tests(tests, entry_point) == expected


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        (6, 6, True),
        (0.1 + 0.2, 0.3, True),
        (1.0, 1, True),
        ([1, [2.0000000001]], [1, [2]], True),
        (True, 1, False),
        ("6", 6, False),
        ([1, 2], [1, 2, 3], False),
        ({"a": 1}, {"a": 1.0}, True),
        (None, 0, False),
    ],
)
def test_same_value(actual, expected, same):
    assert same_value(actual, expected) is same


MODULE_LEVEL = "```python\ndef total(xs):\n    return sum(xs)\n```"
LEETCODE = "```python\nclass Solution:\n    def total(self, xs):\n        return sum(xs)\n```"
WRONG = "```python\ndef total(xs):\n    return len(xs)\n```"
PRINTS = "```python\ndef total(xs):\n    print(sum(xs))\n```"


def test_function_call_tests_call_the_function():
    tests = [
        {"type": "function_call", "fn_name": "total", "input": [[1, 2, 3]], "output": [6]},
        {"type": "function_call", "fn_name": "total", "input": [[1, 1, 1]], "output": [3]},
    ]
    fn = rewards.get("code")
    assert fn([MODULE_LEVEL, LEETCODE, WRONG, PRINTS], tests=[tests] * 4) == [1.0, 1.0, 0.5, 0.0]
    lcb = [{"input": "[0.5, 0.25]", "output": "0.75", "testtype": "functional"}]
    assert fn([MODULE_LEVEL], tests=[lcb], entry_point=["total"]) == [1.0]


def test_last_code_block_is_linear():
    import time

    start = time.perf_counter()
    assert last_code_block("`" * 96_000) is None
    assert last_code_block("```python\n" + "x = 1\n" * 20_000 + "``" * 30_000) == "x = 1\n" * 20_000
    assert last_code_block("```\n" * 40_000) == "" and last_code_block("```python" * 20_000) is None
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(("cores_env", "expected_max"), [("8", None), ("1", None), ("", None)])
def test_max_workers_default_is_the_rank_share(monkeypatch, cores_env, expected_max):
    from gspo_trl.rewards.math_verify_reward import usable_cores

    monkeypatch.setenv("LOCAL_WORLD_SIZE", cores_env)
    share = max(1, usable_cores() // max(1, int(cores_env or 1)))
    assert rank_share_of_cores() == share
    assert rewards.get("code").max_workers == share
