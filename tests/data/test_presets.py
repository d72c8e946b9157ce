"""Dataset presets and column renames.

Loading and grading every preset on its dataset's full real schema is in
tests/data/test_recipe_fixtures.py; this file tests the preset table's mechanics.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections import DataConfig
from gspo_trl.core.errors import DataError
from gspo_trl.data.loading import load_data
from gspo_trl.data.presets import PRESETS, apply_preset, gsm8k_final_answer
from tests._paths import FIXTURES, ROOT

os.environ["HF_HUB_OFFLINE"] = "1"

# One raw row per preset, with the columns its hub source has (trimmed to what matters).
RAW_ROWS: dict[str, dict[str, Any]] = {
    "gsm8k": {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    "math500": {"problem": "What is $2^3$?", "solution": "$2^3 = \\boxed{8}$", "answer": "8", "level": 1},
    "dapo-math": {
        "prompt": "Compute 6*7.",
        "solution": "42",
        "source_prompt": [{"content": 'Solve ... Compute 6*7. ... after "Answer:".', "role": "user"}],
    },
    "dapo-math-17k": {
        "prompt": [{"content": 'Solve ... Compute 6*7. ... after "Answer:".', "role": "user"}],
        "reward_model": {"ground_truth": "42", "style": "rule-lighteval/MATH_v2"},
    },
    "openr1-math": {"problem": "Find x if x+1=3.", "answer": "2", "solution": "x = 2"},
    "verifiable-coding": {
        "problem_statement": "Read n and print n squared.",
        "verification_info": {
            "language": "python",
            "test_cases": [{"input": "3\n", "output": "9", "type": "stdin_stdout"}],
        },
        "gold_standard_solution": "print(int(input())**2)",
    },
    "humaneval": {
        "task_id": "Local/0",
        "prompt": "def double(x):\n    '''Twice x.'''\n",
        "canonical_solution": "    return 2 * x\n",
        "test": "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(-1) == -2\n",
        "entry_point": "double",
    },
}


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("2 + 5 = 7\n#### 7", "7"),
        ("#### 1,234", "1234"),
        ("a #### b\n####  -5 ", "-5"),  # the last marker counts
        ("#### 0.5", "0.5"),
    ],
)
def test_gsm8k_final_answer(answer: str, expected: str) -> None:
    assert gsm8k_final_answer(answer) == expected


def test_gsm8k_row_without_final_answer_is_named(tmp_path: Path) -> None:
    rows = [RAW_ROWS["gsm8k"], {"question": "q", "answer": "no final line"}]
    path = _write_jsonl(tmp_path / "g.jsonl", rows)
    with pytest.raises(DataError, match=r"row 1: preset 'gsm8k'.*####"):
        load_data(DataConfig(preset="gsm8k", path=str(path), split="train", eval_split=None))


def test_preset_fills_only_unset_keys() -> None:
    config = apply_preset(DataConfig(preset="gsm8k", eval_split="validation", columns={"x": "y"}))
    assert (config.path, config.name, config.prompt_column) == ("openai/gsm8k", "main", "question")
    assert config.eval_split == "validation"  # the user's key wins
    humaneval = apply_preset(DataConfig(preset="humaneval", columns={"test": "my_tests"}))
    assert humaneval.columns == {"test": "my_tests"}


def test_humaneval_preset_reads_the_packaged_problems() -> None:
    train, _ = load_data(DataConfig(preset="humaneval", eval_split=None))
    assert len(train) == 164
    assert {"tests", "entry_point", "code_prompt", "canonical_solution"} <= set(train.column_names)
    assert "```python" in train[0]["prompt"][0]["content"]


def test_recipe_names_a_preset(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "m.jsonl", [RAW_ROWS["math500"]] * 3)
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(f"data: {{preset: math500, path: {path}, split: train}}\nrewards: [math]\n")
    recipe = load_recipe(recipe_file)
    train, _ = load_data(recipe.data)
    assert train["solution"] == ["8"] * 3


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DataConfig(preset="gsm9k"), r"unknown preset 'gsm9k'.*gsm8k"),
        (DataConfig(preset="verifiable-coding", path="{file}", split="train"), r"'verification_info'"),
        (DataConfig(preset="math500", path="{file}", split="train"), r"column\(s\) \['problem', 'answer'\]"),
    ],
)
def test_preset_errors_name_the_problem(config: DataConfig, message: str, tmp_path: Path) -> None:
    config.path = config.path.replace("{file}", str(_write_jsonl(tmp_path / "d.jsonl", [{"text": "hi"}])))
    with pytest.raises(DataError, match=message):
        load_data(config)


def test_docs_list_every_preset() -> None:
    docs = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    for name, preset in PRESETS.items():
        assert f"| `{name}` | " in docs, name
        assert preset.config["path"] in docs or name == "humaneval", name


@pytest.mark.parametrize(
    ("row", "columns", "expected"),
    [
        # MATH-500 / OpenR1-Math: answer -> solution lands on the worked `solution`.
        (
            {"problem": "p", "solution": "worked", "answer": "8"},
            {"answer": "solution"},
            {"solution": "8", "solution_original": "worked"},
        ),
        # A swap is a rename, not a clash.
        ({"prompt": "p", "a": "1", "b": "2"}, {"a": "b", "b": "a"}, {"a": "2", "b": "1"}),
        # The source moved away first: nothing to move aside.
        (
            {"problem": "p", "solution": "w", "answer": "8"},
            {"answer": "solution", "solution": "worked"},
            {"solution": "8", "worked": "w"},
        ),
    ],
)
def test_a_rename_onto_an_existing_column_moves_it_aside(
    row: dict[str, Any], columns: dict[str, str], expected: dict[str, Any], tmp_path: Path, caplog: Any
) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [row])
    prompt_column = "problem" if "problem" in row else "prompt"
    train, _ = load_data(DataConfig(path=str(path), prompt_column=prompt_column, columns=columns))
    assert {key: train[0][key] for key in expected} == expected
    assert len(set(train.column_names)) == len(train.column_names) == len(row)
    assert ("solution_original" in caplog.text) == ("solution_original" in expected)


def test_a_rename_clash_with_no_free_name_is_refused(tmp_path: Path) -> None:
    row = {"prompt": "p", "solution": "w", "solution_original": "x", "answer": "8"}
    path = _write_jsonl(tmp_path / "d.jsonl", [row])
    with pytest.raises(DataError, match=r"'answer' -> 'solution'.*'solution_original' is taken"):
        load_data(DataConfig(path=str(path), solution_column="answer"))


@pytest.mark.parametrize("name", ["dapo-math", "dapo-math-17k"])
def test_dapo_presets_grade_boxed_and_answer_line_alike(name: str) -> None:
    """DAPO's own prompt asks for `Answer: N`; models often box anyway: the grader reads both."""
    from gspo_trl import rewards
    from gspo_trl.data.presets import default_reward

    fixtures = FIXTURES
    config = apply_preset(DataConfig(preset=name))
    train, _ = load_data(DataConfig(preset=name, path=str(fixtures / f"{name}.jsonl"), split=config.split))
    completions = [
        json.loads(line) for line in (fixtures / f"{name}.completions.jsonl").read_text().splitlines() if line
    ]
    spec, params = default_reward(DataConfig(preset=name))
    grader = rewards.get(spec, **params)
    for key, expected in (("correct", 1.0), ("correct_answer_line", 1.0), ("wrong", 0.0)):
        graded = grader([c[key] for c in completions], solution=train["solution"])
        assert graded == [expected] * len(train), key


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"reward_model": {"style": "rule"}},
            r"row 1: preset 'dapo-math-17k': reward_model has no ground_truth",
        ),
        ({"reward_model": None}, r"row 1: preset 'dapo-math-17k': reward_model has no ground_truth: None"),
    ],
)
def test_dapo_17k_row_without_gold_is_named(row: dict[str, Any], message: str, tmp_path: Path) -> None:
    prompt = RAW_ROWS["dapo-math-17k"]["prompt"]
    path = _write_jsonl(tmp_path / "d.jsonl", [RAW_ROWS["dapo-math-17k"], {"prompt": prompt, **row}])
    with pytest.raises(DataError, match=message):
        load_data(DataConfig(preset="dapo-math-17k", path=str(path)))
