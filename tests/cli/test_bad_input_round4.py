"""Issue 30's bad inputs (items 2, 6, 8): each refused by `validate` and `train` alike, in one
line naming the culprit, before anything is written or expanded.

Small inputs that asked for unbounded memory (a YAML alias bomb, a synthetic source of 1e9
rows, a generation batch whose logits alone exceed any machine), an output_dir that would
overwrite or delete the model a run starts from, output_dir symbolic links that point nowhere,
and a seed numpy refuses at the start of training.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from tests._cli_helpers import refused_alike
from tests._gspo_helpers import tiny_model_dir
from tests.cli.test_bad_input import _recipe


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("model"))


def _alias_bomb(tmp_path: Path) -> list[str]:
    """The 2.6 KB file of the issue: nine levels of nine aliases, 9^9 leaves when walked."""
    lines = ['a0: &a0 ["lol"]']
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [{', '.join(f'*a{level - 1}' for _ in range(9))}]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_recipe(tmp_path).read_text() + "\n".join(lines) + "\n")
    assert bomb.stat().st_size < 4096
    return [str(bomb)]


_OVERRIDE_BOMB = (
    "[&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1], "
    + ", ".join(f"&a{level} [{', '.join([f'*a{level - 1}'] * 9)}]" for level in range(1, 7))
    + "]"
)
"""One command-line value: 9^7 leaves when expanded."""


def _loop(tmp_path: Path) -> Path:
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    return tmp_path / "loop_a"


def _dangling(tmp_path: Path) -> Path:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "run")
    return tmp_path / "dangling"


def _cut_config(tmp_path: Path, model: Path) -> Path:
    import shutil

    copy = tmp_path / "cut_model"
    shutil.copytree(model, copy)
    (copy / "config.json").write_text('{"model_type": "qwen3", "hidden_size": ')
    return copy


CASES = [
    # (id and issue item, argv (a function of tmp_path and the tiny model dir), words the error must contain)
    ("6: YAML alias bomb", lambda t, m: _alias_bomb(t), ["bomb.yaml", "aliases", "131,072 values"]),
    (
        "6: YAML alias bomb in an override value",
        lambda t, m: [str(_recipe(t)), "--model_init_kwargs", "{x: " + _OVERRIDE_BOMB + "}"],
        ["override value", "aliases", "131,072 values"],
    ),
    (
        "6: 1e9 synthetic rows",
        lambda t, m: [str(_recipe(t)), "--data.num_rows", "1000000000"],
        ["data.num_rows", "1,000,000,000", "synthetic:reversal", "11,097,900 distinct problems"],
    ),
    (
        "6: num_generations 65536 and a generation batch to match",
        lambda t, m: [
            str(_recipe(t)),
            *("--model.name_or_path", str(m), "--num_generations", "65536"),
            *("--per_device_train_batch_size", str(1 << 31)),
        ],
        [
            "num_generations",
            "8,589,934,592 completions",
            "x 371 (vocabulary)",
            "float32 logits",
            "GiB of memory",
            "use_vllm",
        ],
    ),
    (
        "43: 65536 x 65536 before the tiny model is built",
        lambda t, m: [
            str(_recipe(t)),
            "--num_generations",
            "65536",
            "--per_device_train_batch_size",
            "65536",
        ],
        ["num_generations x per_device_train_batch_size", "262,144 completions per process", "65,536"],
    ),
    (
        "2: output_dir is the model's folder",
        lambda t, m: [str(_recipe(t, output_dir=m)), "--model.name_or_path", str(m)],
        ["output_dir", "is the model's folder", "overwrite the base model"],
    ),
    (
        "2: the model is a checkpoint of output_dir",
        lambda t, m: [
            str(_recipe(t, output_dir=m.parent)),
            "--model.name_or_path",
            str(m.parent / "checkpoint-4"),
        ],
        ["output_dir", "holds the model", "deletes or replaces"],
    ),
    (
        "8: output_dir a symlink loop",
        lambda t, m: [str(_recipe(t, output_dir=_loop(t)))],
        ["output_dir", "loop_a", "symbolic link", "loops back on itself"],
    ),
    (
        "8: output_dir a dangling symlink",
        lambda t, m: [str(_recipe(t, output_dir=_dangling(t) / "sub"))],
        ["output_dir", "dangling", "symbolic link", "does not exist"],
    ),
    (
        "8: a model folder whose config.json is cut short",
        lambda t, m: [str(_recipe(t)), "--model.name_or_path", str(_cut_config(t, m))],
        ["model.name_or_path", "config.json", "is not readable JSON", "download or save the model again"],
    ),
    ("8: seed -1", lambda t, m: [str(_recipe(t)), "--seed", "-1"], ["seed: -1", "2**32 - 1"]),
]


@pytest.mark.parametrize(("case", "argv", "words"), CASES, ids=[c[0] for c in CASES])
def test_issue_30_bad_input_is_refused_by_validate_and_train_alike(
    tmp_path, capsys, model_dir, case, argv, words
) -> None:
    if case.startswith("2: the model is a checkpoint"):
        import shutil

        shutil.copytree(model_dir, tmp_path / "run" / "checkpoint-4")
        model_dir = tmp_path / "run" / "checkpoint-4"
    message = refused_alike(argv(tmp_path, model_dir), capsys)
    for word in words:
        assert word in message, message


def test_a_model_folder_inside_output_dir_or_around_it_is_fine(tmp_path, capsys, model_dir) -> None:
    """Only what a run writes over or deletes is refused: the model in a folder of its own
    under output_dir, or output_dir inside the model's folder, validate."""
    import shutil

    shutil.copytree(model_dir, tmp_path / "run" / "base")
    inside = [
        str(_recipe(tmp_path, output_dir=tmp_path / "run")),
        "--model.name_or_path",
        str(tmp_path / "run" / "base"),
    ]
    assert gspo_trl_main(["validate", *inside]) == 0, capsys.readouterr().err
    around = [
        str(_recipe(tmp_path, output_dir=model_dir / "runs" / "a")),
        "--model.name_or_path",
        str(model_dir),
    ]
    assert gspo_trl_main(["validate", *around]) == 0, capsys.readouterr().err


def test_train_refuses_a_lock_path_that_is_a_directory_in_one_line(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    (out / ".gspo-trl.lock").mkdir(parents=True)
    assert gspo_trl_main(["train", str(_recipe(tmp_path, output_dir=out))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        f"error: output_dir: cannot open the run lock {out / '.gspo-trl.lock'}: Is a directory; "
        "remove what is there or give another output_dir"
    ]
    assert os.listdir(out) == [".gspo-trl.lock"]
