"""`gspo-trl validate` and `gspo-trl train` refuse the same recipes with the same message.

Both run `gspo_trl.training.preflight` before a model loads, so every refusal below must come
out of both commands identically: exit status 2, one line on stderr naming the key, file or
row at fault, no traceback. A case `validate` let through would make `train` start loading
a model (and this test time out or fail), which is the bug this table guards against.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from tests._cli_helpers import refused_alike

BASE_RECIPE = """\
model: {name_or_path: tiny, dtype: float32}
data: {path: synthetic:reversal, num_rows: 64, solution_column: solution, eval_size: 16}
rewards: [gspo_trl.data.synthetic:digit_reversal_reward]
heldout: {reward: gspo_trl.data.synthetic:exact_match, max_rows: 4}
num_generations: 4
per_device_train_batch_size: 8
max_completion_length: 8
max_steps: 1
save_strategy: "no"
report_to: none
"""


def _null_gold_rows(tmp_path: Path) -> str:
    path = tmp_path / "null_gold.jsonl"
    rows = [{"prompt": "reverse 12", "solution": "21"}, {"prompt": "reverse 34", "solution": None}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _a_file(tmp_path: Path) -> str:
    path = tmp_path / "not_a_dir"
    path.write_text("")
    return str(path)


CASES = [
    # (id, overrides (a function of tmp_path for paths), words the one-line error must contain)
    ("unknown key", lambda t: ["--lerning_rate", "1e-5"], ["lerning_rate", "learning_rate"]),
    ("negative lr", lambda t: ["--learning_rate", "-1e-5"], ["learning_rate", "> 0"]),
    ("nan lr", lambda t: ["--learning_rate", ".nan"], ["learning_rate"]),
    ("token-sum loss", lambda t: ["--loss_type", "dapo"], ["loss_type", "dapo"]),
    ("clip range", lambda t: ["--epsilon", "1.5"], ["epsilon"]),
    ("on-policy", lambda t: ["--steps_per_generation", "1"], ["on-policy"]),
    ("groups", lambda t: ["--num_generations", "3"], ["num_generations"]),
    ("zero length", lambda t: ["--max_completion_length", "0"], ["max_completion_length"]),
    ("zero accumulation", lambda t: ["--gradient_accumulation_steps", "0"], ["gradient_accumulation_steps"]),
    ("zero temperature", lambda t: ["--temperature", "0"], ["temperature"]),
    ("zero batch", lambda t: ["--per_device_train_batch_size", "0"], ["per_device_train_batch_size"]),
    ("heldout k", lambda t: ["--heldout.k", "[0]"], ["heldout.k"]),
    ("heldout columns", lambda t: ["--heldout.reward", "code"], ["heldout.reward", "tests"]),
    ("heldout split", lambda t: ["--data.eval_size", "0"], ["heldout", "eval_size"]),
    (
        "nan weight",
        lambda t: ["--rewards", "[{name: gspo_trl.data.synthetic:digit_reversal_reward, weight: .nan}]"],
        ["weight"],
    ),
    (
        "same metric name",
        lambda t: [
            "--rewards",
            "[gspo_trl.data.synthetic:digit_reversal_reward, gspo_trl.data.synthetic:digit_reversal_reward]",
        ],
        ["label", "rewards[1]"],
    ),
    ("columns as list", lambda t: ["--data.columns", "[a, b]"], ["data.columns", "list"]),
    ("dtype", lambda t: ["--model.dtype", "float128"], ["model.dtype", "float128"]),
    ("missing model dir", lambda t: ["--model.name_or_path", str(t / "no-model")], ["model.name_or_path"]),
    (
        "null gold",
        lambda t: ["--data.path", _null_gold_rows(t), "--data.eval_size", "1"],
        ["row 1:", "solution"],
    ),
    ("output_dir is a file", lambda t: ["--output_dir", _a_file(t)], ["output_dir"]),
]


@pytest.mark.parametrize(("case", "overrides", "words"), CASES, ids=[c[0] for c in CASES])
def test_validate_and_train_refuse_alike(tmp_path, capsys, case, overrides, words) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(BASE_RECIPE + f"output_dir: {tmp_path / 'out'}\n")
    message = refused_alike([str(recipe), *overrides(tmp_path)], capsys)
    for word in words:
        assert word in message, message


def test_the_base_recipe_validates(tmp_path, capsys) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(BASE_RECIPE + f"output_dir: {tmp_path / 'out'}\n")
    assert gspo_trl_main(["validate", str(recipe)]) == 0
    assert ": ok (gspo, 1 reward(s), 48 training rows, 16 eval rows)" in capsys.readouterr().out
