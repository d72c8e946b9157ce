"""Bad data files and settings are refused by `validate` and `train` alike, in one line.

The sibling of tests/training/test_preflight.py's table, for input that used to end in a traceback
or train on garbage: undecodable or broken data files (named by line, not byte position),
renames that would lose a column, held-out fractions that leave nothing to train on, reward
parameters only the reward's own constructor checks, code tests the code reward cannot
read, and an output directory on a read-only file system. Each case runs both commands;
`train` reaching the model would fail the one-line check (or the test's timeout).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from tests._cli_helpers import refused_alike
from tests.training.test_preflight import BASE_RECIPE


def _write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _rows(*rows: dict) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


GOOD = [{"prompt": f"reverse {n}", "solution": str(n)[::-1]} for n in (12, 34, 56)]


def _data(path: str) -> list[str]:
    return ["--data.path", path, "--data.eval_size", "1"]


def _mbpp_rows(tests: list) -> bytes:
    return _rows(*({"prompt": f"write f{n}", "tests": test} for n, test in enumerate(tests)))


CASES: list[tuple[str, str, Callable[[Path], list[str]], list[str]]] = [
    # (id, extra recipe text, overrides (a function of tmp_path), words the error must contain)
    (
        "non-UTF-8 line",
        "",
        lambda t: _data(
            _write(
                t, "latin1.jsonl", _rows(*GOOD) + '{"prompt": "caf\xe9", "solution": "1"}\n'.encode("latin-1")
            )
        ),
        ["latin1.jsonl", "line 4", "UTF-8"],
    ),
    (
        "broken JSONL line",
        "",
        lambda t: _data(
            _write(t, "broken.jsonl", _rows(*GOOD[:2]) + b'{"prompt": "x", "solution": \n' + _rows(GOOD[2]))
        ),
        ["broken.jsonl", "line 3"],
    ),
    (
        "JSONL line not an object",
        "",
        lambda t: _data(_write(t, "list.jsonl", _rows(*GOOD) + b"[1, 2]\n")),
        ["list.jsonl", "line 4", "object"],
    ),
    (
        "broken JSON array",
        "",
        lambda t: _data(
            _write(t, "rows.json", b'[{"prompt": "a", "solution": "1"},\n {"prompt": "b" "solution": "2"}]')
        ),
        ["rows.json", "line 2"],
    ),
    ("system_prompt a number", "data: {system_prompt: 123}\n", lambda t: [], ["data.system_prompt", "quote"]),
    ("eval fraction leaves nothing", "", lambda t: ["--data.eval_size", "0.999"], ["data.eval_size"]),
    (
        "rename onto a column",
        "",
        lambda t: ["--data.columns", "{prompt: solution}"],
        ["data.columns", "'solution'"],
    ),
    (
        "rename onto prompt",
        "",
        lambda t: ["--data.columns", "{solution: prompt}"],
        ["data.columns", "'prompt'"],
    ),
    (
        "math workers -1",
        "",
        lambda t: ["--rewards", "[{name: math, workers: -1}]", "--heldout.reward", "math"],
        ["rewards[0] (math)", "workers"],
    ),
    (
        "unreadable code tests",
        "",
        lambda t: [
            *_data(_write(t, "code.jsonl", _mbpp_rows([[{"stdin": "1", "stdout": "1"}]] * 3))),
            *("--rewards", "[code]", "--heldout.reward", "code"),
        ],
        ["rewards[0] (code)", "row 0", "tests"],
    ),
]


def _recipe(tmp_path: Path, extra: str = "", output_dir: Path | None = None) -> Path:
    recipe = tmp_path / "recipe.yaml"
    base = BASE_RECIPE
    if extra.startswith("data: {"):  # merge into the base recipe's data mapping
        base = base.replace("eval_size: 16}", "eval_size: 16, " + extra[len("data: {") :].rstrip())
        extra = ""
    recipe.write_text(base + extra + f"output_dir: {output_dir or tmp_path / 'out'}\n")
    return recipe


@pytest.mark.parametrize(("case", "extra", "overrides", "words"), CASES, ids=[c[0] for c in CASES])
def test_validate_and_train_refuse_bad_input_alike(tmp_path, capsys, case, extra, overrides, words) -> None:
    message = refused_alike([str(_recipe(tmp_path, extra)), *overrides(tmp_path)], capsys)
    for word in words:
        assert word in message, message


@contextlib.contextmanager
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory this process cannot write: a read-only tmpfs as root (mode bits do not bind
    root), else a chmod 555 directory."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip(f"root, and cannot mount a read-only tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_read_only_output_dir_is_refused(tmp_path, capsys) -> None:
    with read_only_dir(tmp_path) as folder:
        message = refused_alike([str(_recipe(tmp_path, output_dir=folder / "run"))], capsys)
    assert "output_dir" in message and str(folder) in message, message


MBPP_TESTS = ['assert remove_Occ("hello","l") == "heo"', "assert set(remove_Occ('abcda','a')) == set('bcd')"]
MBPP_RIGHT = """```python
def remove_Occ(s, ch):
    first, last = s.find(ch), s.rfind(ch)
    if first < 0:
        return s
    if first == last:
        return s[:first] + s[first + 1 :]
    return s[:first] + s[first + 1 : last] + s[last + 1 :]
```"""
MBPP_WRONG = "```python\ndef remove_Occ(s, ch):\n    return s\n```"


def test_mbpp_assert_lists_validate_and_score(tmp_path, capsys) -> None:
    """docs/data.md's own example (`columns: {test_list: tests}`) on MBPP rows: accepted by
    `validate`, and the code reward runs the asserts (it scored every row None before)."""
    from gspo_trl import rewards

    rows = _rows(*({"text": f"Write remove_Occ, try {n}", "test_list": MBPP_TESTS} for n in range(4)))
    path = _write(tmp_path, "mbpp.jsonl", rows)
    argv = ["validate", str(_recipe(tmp_path)), *_data(path), "--data.prompt_column", "text"]
    argv += ["--data.columns", "{test_list: tests}", "--rewards", "[code]", "--heldout.reward", "code"]
    assert gspo_trl_main(argv) == 0, capsys.readouterr().err
    code = rewards.get("code")
    as_json = json.dumps(MBPP_TESTS)
    scores = code([MBPP_RIGHT, MBPP_WRONG, MBPP_RIGHT], tests=[MBPP_TESTS, MBPP_TESTS, as_json])
    assert scores == [1.0, 0.0, 1.0]
