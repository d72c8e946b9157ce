"""Issue 24 item 4: every problem of a recipe in one run, and a suggestion for each typo.

A recipe with several mistakes is refused by `validate` and `train` alike with one line per
mistake (file and key named) and a count, and no follow-on line for a value that could not
be read. Mistyped override flags, argparse flags and shipped recipe names are answered with
the name meant; a reward that a module in the working directory registers, with the
`imports:` line the recipe lacks; `rewards describe` takes `--import` as `rewards list` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from tests.training.test_preflight import BASE_RECIPE

MISTAKES: list[tuple[str, str, list[str]]] = [
    # (id, recipe line, words its one error line must hold besides the file)
    ("typo in a key", "learnig_rate: 1.0e-6", ["learnig_rate", "did you mean 'learning_rate'?"]),
    ("value of the wrong type", "max_completion_length: long", ["max_completion_length", "got 'long'"]),
    ("token-sum loss", "loss_type: dapo", ["loss_type", "'dapo'", "Use loss_type: grpo"]),
    (
        "unknown reward",
        "rewards: [gspo_trl.data.synthetic:digit_reversal_reward, mathh]",
        ["rewards[1]", "mathh"],
    ),
    # a batch key that cannot be read: its default must not be refused in its place
    ("unreadable batch key", "num_generations: four", ["num_generations", "got 'four'"]),
]


def _recipe(tmp_path: Path, lines: list[str]) -> Path:
    keys = {line.split(":", 1)[0] for line in lines}
    base = [line for line in BASE_RECIPE.splitlines() if line.split(":", 1)[0] not in keys]
    path = tmp_path / "recipe.yaml"
    path.write_text("\n".join([*base, *lines, f"output_dir: {tmp_path / 'out'}"]) + "\n")
    return path


def _errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    assert gspo_trl_main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("error: ")], err


def test_a_recipe_with_several_mistakes_reports_all_of_them_in_one_run(tmp_path, capsys) -> None:
    """Fails on main: it stops at the first mistake (one line)."""
    path = _recipe(tmp_path, [line for _, line, _ in MISTAKES])
    for command in ("validate", "train"):
        lines, err = _errors([command, str(path)], capsys)
        assert len(lines) == len(MISTAKES), err
        for case, _, words in MISTAKES:
            matching = [line for line in lines if all(word in line for word in words)]
            assert len(matching) == 1, (case, err)
            assert matching[0].startswith(f"error: {path}: "), matching[0]
        assert f"gspo-trl {command}: {len(MISTAKES)} problems" in err
    assert not (tmp_path / "out").exists()


SECTION_MISTAKES: list[tuple[str, str, list[list[str]]]] = [
    # (section, its recipe line with three mistakes, the words of each mistake's one line)
    (
        "heldout",
        "heldout: {reward: gspo_trl.data.synthetic:exact_match, evry_steps: 5, max_rows: lots, k: [0]}",
        [
            ["heldout.evry_steps", "did you mean 'every_steps'?"],
            ["heldout.max_rows", "got 'lots'"],
            ["heldout.k", "every k must be >= 1"],
        ],
    ),
    (
        "launch",
        "launch: {nodes: 1, gpus_per_nod: 8, gpu_memory_gb: big, seconds_per_step: [-1]}",
        [
            ["launch.gpus_per_nod", "did you mean 'gpus_per_node'?"],
            ["launch.gpu_memory_gb", "got 'big'"],
            ["launch.seconds_per_step", "positive seconds"],
        ],
    ),
    (
        "diagnostics",
        "diagnostics: {length_bucket: [64], warn_after_steps: soon, warn_clip_fraction: 2}",
        [
            ["diagnostics.length_bucket", "did you mean 'length_buckets'?"],
            ["diagnostics.warn_after_steps", "got 'soon'"],
            ["diagnostics.warn_clip_fraction", "(0, 1]"],
        ],
    ),
    (
        "data",
        "data: {path: synthetic:reversal, num_rows: many, solution_colum: solution, eval_size: 16}",
        [["data.num_rows", "got 'many'"], ["data.solution_colum", "did you mean 'solution_column'?"]],
    ),
    (  # an unreadable gpus_per_node: its default 0 must not be refused against the server layout
        "launch, no follow-on",
        "launch: {nodes: 2, gpus_per_node: eight, server_tensor_parallel_size: 4, "
        "server_data_parallel_size: 2}",
        [["launch.gpus_per_node", "got 'eight'"]],
    ),
]


@pytest.mark.parametrize(
    ("section", "line", "expected"), SECTION_MISTAKES, ids=[section for section, _, _ in SECTION_MISTAKES]
)
def test_every_mistake_in_one_section_is_its_own_line(tmp_path, capsys, section, line, expected) -> None:
    """Fails on main: a section stopped at its first bad key (one line), whatever else it held."""
    path = _recipe(tmp_path, [line, "use_vllm: true", "vllm_mode: server"])
    for command in ("validate", "train"):
        lines, err = _errors([command, str(path)], capsys)
        assert len(lines) == len(expected), (section, err)
        for words in expected:
            matching = [found for found in lines if all(word in found for word in words)]
            assert len(matching) == 1, (words, err)
            assert matching[0].startswith(f"error: {path}: ") or (len(lines) == 1 and str(path) in lines[0])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("case", "line", "words"), MISTAKES, ids=[case for case, _, _ in MISTAKES])
def test_each_mistake_alone_is_one_line(tmp_path, capsys, case, line, words) -> None:
    lines, err = _errors(["validate", str(_recipe(tmp_path, [line]))], capsys)
    assert len(lines) == 1 and all(word in lines[0] for word in words), err
    assert "problems" not in err


def test_an_unknown_override_flag_suggests_the_flag_meant(tmp_path, capsys) -> None:
    """Fails on main: `--lr` got no suggestion (difflib alone finds nothing close to 'lr')."""
    lines, err = _errors(["validate", str(_recipe(tmp_path, [])), "--lr", "1e-6"], capsys)
    assert (
        len(lines) == 1
        and "override --lr: unknown key (did you mean --learning_rate or --local_rank?)" in lines[0]
    ), err


def test_a_mistyped_shipped_recipe_name_suggests_the_recipe_meant(capsys) -> None:
    """Fails on main: it said only 'file not found'."""
    lines, err = _errors(["validate", "tiny/reversl"], capsys)
    assert len(lines) == 1 and "did you mean 'tiny/reversal'?" in lines[0], err
    lines, err = _errors(["recipes", "copy", "tiny/reversl", "x.yaml"], capsys)
    assert "did you mean 'tiny/reversal'?" in lines[0], err


def test_an_unrecognized_argparse_flag_suggests_the_flag_meant(capsys) -> None:
    """Fails on main: argparse's own message has no suggestion."""
    with pytest.raises(SystemExit) as exit_info:
        gspo_trl_main(["rewards", "list", "--imprt", "x"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --imprt x (did you mean --import?)" in capsys.readouterr().err


REWARD_MODULE = """
import gspo_trl.rewards as rewards


@rewards.register("{name}")
def scored(completions, **kwargs):
    return [0.0] * len(completions)
"""


def test_an_unknown_reward_a_local_module_registers_asks_for_its_import(
    tmp_path, capsys, monkeypatch
) -> None:
    """Fails on main: the unknown-reward line did not say which `imports:` was missing."""
    (tmp_path / "local_rewards_24.py").write_text(REWARD_MODULE.format(name="numeric_24"))
    monkeypatch.chdir(tmp_path)
    reward = "rewards: [numeric_24]"
    lines, err = _errors(["validate", str(_recipe(tmp_path, [reward]))], capsys)
    assert len(lines) == 1 and "did you forget `imports: [local_rewards_24]`?" in lines[0], err
    lines, err = _errors(["rewards", "describe", "numeric_24"], capsys)
    assert "did you forget `--import local_rewards_24`?" in lines[0], err
    import gspo_trl.rewards as rewards

    with pytest.raises(rewards.UnknownRewardError):  # read as text, never imported
        rewards.describe("numeric_24")


def test_rewards_describe_takes_import_like_rewards_list(tmp_path, capsys, monkeypatch) -> None:
    """Fails on main: `describe` refused `--import` (unrecognized arguments)."""
    (tmp_path / "described_rewards_24.py").write_text(REWARD_MODULE.format(name="described_24"))
    monkeypatch.chdir(tmp_path)
    assert gspo_trl_main(["rewards", "describe", "described_24", "--import", "described_rewards_24"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("described_24\n") and "described_rewards_24" in out


@pytest.mark.parametrize(
    ("name", "candidates", "expected"),
    [
        ("lr", ["learning_rate", "lr_scheduler_type", "logging_steps"], ["learning_rate"]),
        ("learnig_rate", ["learning_rate", "warmup_ratio"], ["learning_rate"]),
        ("--imprt", ["--import", "--help"], ["--import"]),
        ("--learn", ["--learning_rate", "--logging_steps"], ["--learning_rate"]),
        ("tiny/reversl", ["tiny/reversal", "qwen3-1.7b/math"], ["tiny/reversal"]),
        ("ab", ["learning_rate", "max_steps"], []),  # two letters that are nothing's initials
        ("le", ["learning_rate", "length_buckets"], []),  # a prefix too short to choose
    ],
)
def test_close_matches(name, candidates, expected) -> None:
    """Fails on main: there is no gspo_trl.core.suggest (difflib alone misses `lr`, `--learn`)."""
    from gspo_trl.core.suggest import close_matches

    assert close_matches(name, candidates) == expected
