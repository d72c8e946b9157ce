"""The ``code`` reward's plumbing: code extraction, test formats, scoring modes, sandbox selection."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import rewards
from rewards.code import StdioTest, last_code_block, read_tests, same_output


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


def test_fallback_when_bwrap_is_absent():
    """Without bwrap on PATH, 'auto' picks the rlimit sandbox, warns once, and still scores."""
    script = (
        "import logging, rewards\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from rewards.execution import sandbox\n"
        "print(sandbox.resolve_mode('auto'), sandbox.resolve_mode('auto'))\n"
        "fn = rewards.get('code')\n"
        f"print(fn(['```python\\nprint(int(input()) ** 2)\\n```'] * 2, tests=[{SQUARE!r}] * 2))\n"
    )
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["rlimit rlimit", "[1.0, 1.0]"]
    assert done.stderr.count("bubblewrap (bwrap) is not usable") == 1


def test_env_var_forces_fallback(monkeypatch):
    from rewards.execution import sandbox

    monkeypatch.setenv("GSPO_TRL_SANDBOX", "rlimit")
    assert sandbox.resolve_mode("auto") == "rlimit"
    result = sandbox.run({"kind": "stdio", "solution": "print(1)"})
    assert result.mode == "rlimit" and result.stdout == b"1\n"
    monkeypatch.setenv("GSPO_TRL_SANDBOX", "nonsense")
    with pytest.raises(ValueError, match="nonsense"):
        sandbox.resolve_mode("auto")
