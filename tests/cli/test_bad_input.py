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
import re
import subprocess
import sys
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

    rows = _rows(*({"text": f"Write remove_Occ, try {n}", "test_list": MBPP_TESTS} for n in range(16)))
    path = _write(tmp_path, "mbpp.jsonl", rows)
    argv = ["validate", str(_recipe(tmp_path)), *_data(path), "--data.prompt_column", "text"]
    argv += ["--data.columns", "{test_list: tests}", "--rewards", "[code]", "--heldout.reward", "code"]
    assert gspo_trl_main(argv) == 0, capsys.readouterr().err
    code = rewards.get("code")
    as_json = json.dumps(MBPP_TESTS)
    scores = code([MBPP_RIGHT, MBPP_WRONG, MBPP_RIGHT], tests=[MBPP_TESTS, MBPP_TESTS, as_json])
    assert scores == [1.0, 0.0, 1.0]


# --- issue 21, items 5-10: input that trained silently, hung, or was refused only after TRL loaded ---


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model on disk: 512 positions (TinyModelSpec), a tokenizer.json to count with."""
    from tests._gspo_helpers import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("model"))


def _chat_rows(tmp_path: Path, name: str, messages: list[dict]) -> list[str]:
    rows = _rows(*({"prompt": messages, "solution": "21"} for _ in range(40)))
    return [*_data(_write(tmp_path, name, rows)), "--data.eval_size", "4"]


def _long_prompt_rows(tmp_path: Path, model: Path) -> list[str]:
    rows = [{"prompt": f"reverse {n}", "solution": str(n)[::-1]} for n in range(10, 50)]
    rows[3]["prompt"] = "reverse " + "1 " * 15_000  # one token per digit and space: 30k tokens
    return [*_data(_write(tmp_path, "long.jsonl", _rows(*rows))), "--model.name_or_path", str(model)]


def _sparse_recipe(tmp_path: Path, size: int) -> Path:
    """A `size`-byte recipe file, sparse (nothing is written to disk): its start is a valid recipe."""
    path = _recipe(tmp_path)
    with path.open("r+b") as file:
        file.truncate(size)
    return path


def _broken_yaml(tmp_path: Path) -> Path:
    path = _recipe(tmp_path)
    path.write_text(path.read_text() + "learning_rate: [1e-6\n")
    return path


ISSUE_21_CASES: list[tuple[str, Callable[[Path, Path], list[str]], list[str]]] = [
    # (id and issue item, argv (a function of tmp_path and the tiny model dir), words the error must contain)
    (
        "5: 1 row, smaller than one batch",
        lambda t, m: [
            str(_recipe(t)),
            *_data(_write(t, "two.jsonl", _rows(GOOD[0], GOOD[1]))),
            "--data.eval_size",
            "1",  # one row held out for the recipe's heldout section; 0 would be a second problem
        ],
        ["data:", "1 training row(s)", "8 prompts", "0 steps"],
    ),
    (
        "5: eval split leaves less than a batch",
        lambda t, m: [str(_recipe(t)), "--data.num_rows", "20", "--data.eval_size", "16"],
        ["data:", "4 training row(s)", "8 prompts"],
    ),
    (
        "7: unknown chat role",
        lambda t, m: [
            str(_recipe(t)),
            *_chat_rows(t, "role.jsonl", [{"role": "usr", "content": "reverse 12"}]),
        ],
        ["role.jsonl", "row 0", "role 'usr'"],
    ),
    (
        "7: assistant turns only",
        lambda t, m: [
            str(_recipe(t)),
            *_chat_rows(t, "assistant.jsonl", [{"role": "assistant", "content": "reverse 12"}]),
        ],
        ["assistant.jsonl", "row 0", "no user message"],
    ),
    (
        "8: 200 MB recipe",
        lambda t, m: [str(_sparse_recipe(t, 200 << 20))],
        ["recipe.yaml", "larger than 256 KiB"],
    ),
    (
        "9: 30k-token prompt, 512 positions",
        lambda t, m: [str(_recipe(t)), *_long_prompt_rows(t, m)],
        ["long.jsonl", "row 3", "30002 tokens", "512 positions", "max_position_embeddings"],
    ),
    (
        "10: YAML syntax error",
        lambda t, m: [str(_broken_yaml(t))],
        ["recipe.yaml", "line 13", "YAML error"],
    ),
]


@pytest.mark.parametrize(("case", "argv", "words"), ISSUE_21_CASES, ids=[c[0] for c in ISSUE_21_CASES])
def test_issue_21_bad_input_is_refused_by_validate_and_train_alike(
    tmp_path, capsys, tiny_dir, case, argv, words
) -> None:
    message = refused_alike(argv(tmp_path, tiny_dir), capsys)
    for word in words:
        assert word in message, message


NO_MODEL_SCRIPT = """
import json, sys
from gspo_trl.cli.main import main
heavy = ("torch", "transformers", "trl", "vllm", "deepspeed")
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    print(json.dumps([argv[0], code, [name for name in heavy if name in sys.modules]]), flush=True)
"""


def test_train_refuses_issue_21_input_before_importing_the_training_stack(tmp_path, tiny_dir) -> None:
    """Every refusal above, through `train` in one fresh process: after each, neither torch nor
    TRL nor vLLM is imported (no model can have loaded), the same cost as `validate`'s."""
    for i in range(len(ISSUE_21_CASES)):
        (tmp_path / str(i)).mkdir()
    runs = [["train", *argv(tmp_path / str(i), tiny_dir)] for i, (_, argv, _) in enumerate(ISSUE_21_CASES)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", NO_MODEL_SCRIPT, json.dumps(runs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(reports) == len(runs), result.stderr[-3000:]
    for (case, _, _), (command, code, imported) in zip(ISSUE_21_CASES, reports, strict=True):
        assert (command, code, imported) == ("train", 2, []), (case, code, imported)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == len(runs) and "Traceback" not in result.stderr, result.stderr


REWARDS_21 = """
def all_none(completions, **kwargs):
    return [None] * len(completions)


def all_nan(completions, **kwargs):
    return [float("nan")] * len(completions)


def huge(completions, **kwargs):
    return [1e308] + [0.0] * (len(completions) - 1)
"""


@pytest.mark.parametrize(
    ("reward", "words"),
    [
        ("all_none", ["'all_none'", "judged none of the 32 completions of the first rollout batch"]),
        ("all_nan", ["'all_nan'", "judged none", "None or NaN"]),
        ("huge", ["'huge'", "1e+308", "row 0", "+-1e+06"]),
    ],
)
def test_issue_21_rewards_that_judge_nothing_or_absurdly_stop_the_first_batch(
    tmp_path, capsys, reward, words
):
    """Item 6: only completions show these, so `validate` accepts the recipe and `train` stops
    on the first rollout batch (before any optimizer step), exit 2, one line naming the reward."""
    module = tmp_path / "rewards21.py"
    module.write_text(REWARDS_21)
    argv = [str(_recipe(tmp_path)), "--rewards", f"[{module}:{reward}]", "--max_steps", "2"]
    assert gspo_trl_main(["validate", *argv]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert gspo_trl_main(["train", *argv]) == 2
    err = capsys.readouterr().err
    lines = re.findall(r"error: .*", err)
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    assert not (tmp_path / "out" / "trainer_state.json").exists()
