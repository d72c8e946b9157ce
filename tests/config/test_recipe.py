"""Recipe loading and validation: GSPO defaults, typed overrides, and a table of bad recipes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gspo_trl.config.batch import rollout_batch
from gspo_trl.config.defaults import GSPO_DEFAULTS
from gspo_trl.config.recipe import load_recipe, parse_overrides
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from tests._paths import ROOT

TINY_RECIPE = ROOT / "recipes" / "tiny" / "reversal.yaml"

GOOD = """\
model: {name_or_path: tiny}
data: {path: synthetic:reversal, solution_column: solution}
rewards: [gspo_trl.data.synthetic:digit_reversal_reward]
per_device_train_batch_size: 8
num_generations: 4
"""


def write(tmp_path: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_empty_recipe_gets_the_gspo_paper_defaults(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, GOOD))
    for key, value in GSPO_DEFAULTS.items():
        assert recipe.training[key] == value, key
    assert recipe.algorithm == "gspo"
    validate(recipe, processes=1)


@pytest.mark.parametrize(
    ("algorithm", "level", "epsilon"),
    [("gspo", "sequence", 3e-4), ("gspo_token", "token", 3e-4), ("grpo", "token", 0.2)],
)
def test_algorithm_presets(tmp_path: Path, algorithm: str, level: str, epsilon: float) -> None:
    recipe = load_recipe(write(tmp_path, GOOD), {"algorithm": algorithm})
    assert recipe.training["importance_sampling_level"] == level
    assert recipe.training["epsilon"] == epsilon
    assert recipe.training["loss_type"] == "grpo"
    validate(recipe, processes=1)


def test_yaml_strings_and_overrides_are_converted_to_field_types(tmp_path: Path) -> None:
    # PyYAML reads 1e-6 as a *string*; the loader must still hand TRL a float.
    path = write(tmp_path, GOOD + "learning_rate: 1e-6\nbf16: 'false'\n")
    recipe = load_recipe(
        path, ["--max_steps", "7", "--epsilon_high=5e-4", "--model.dtype", "float32", "--bf16"]
    )
    assert recipe.training["learning_rate"] == pytest.approx(1e-6)
    assert recipe.training["max_steps"] == 7 and isinstance(recipe.training["max_steps"], int)
    assert recipe.training["epsilon_high"] == pytest.approx(5e-4)
    assert recipe.training["bf16"] is True
    assert recipe.model.dtype == "float32"
    assert {"learning_rate", "max_steps", "epsilon_high", "bf16"} <= recipe.explicit_keys


@pytest.mark.parametrize("word", ["no", "off", "yes"])
def test_yaml_booleans_for_text_fields(tmp_path: Path, word: str) -> None:
    # On the command line the word stays text; unquoted in YAML it is a boolean: say so.
    assert load_recipe(write(tmp_path, GOOD), ["--save_strategy", word]).training["save_strategy"] == word
    with pytest.raises(RecipeError, match="quote the word"):
        load_recipe(write(tmp_path, GOOD + f"save_strategy: {word}\n"))


def test_reward_list_with_weights_and_params(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        GOOD.replace(
            "rewards: [gspo_trl.data.synthetic:digit_reversal_reward]",
            "rewards:\n  - gspo_trl.data.synthetic:digit_reversal_reward\n"
            "  - {name: repetition, weight: 0.5}",
        ),
    )
    recipe = load_recipe(path)
    assert [(r.spec, r.weight) for r in recipe.rewards] == [
        ("gspo_trl.data.synthetic:digit_reversal_reward", 1.0),
        ("repetition", 0.5),
    ]
    validate(recipe, processes=1)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["--learning_rate", "5e-7"], {"learning_rate": "5e-7"}),  # typed later, by field
        (["--bf16"], {"bf16": "true"}),  # a bare flag means true
        (["--bf16", "--seed", "3"], {"bf16": "true", "seed": "3"}),
        (["--save_strategy", "no"], {"save_strategy": "no"}),  # not YAML's boolean False
        (["--model.name_or_path=Qwen/Qwen3-4B"], {"model.name_or_path": "Qwen/Qwen3-4B"}),
        (["--rewards", "[math, format]"], {"rewards": ["math", "format"]}),
        (["--report-to", "none"], {"report_to": "none"}),
    ],
)
def test_parse_overrides(tokens: list[str], expected: dict) -> None:
    assert parse_overrides(tokens) == expected


def test_generation_batch_size_replaces_steps_per_generation(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, GOOD + "generation_batch_size: 32\n"))
    assert "steps_per_generation" not in recipe.training
    assert rollout_batch(recipe.training, 1).optimizer_updates == 4
    validate(recipe, processes=1)


SERVER = "use_vllm: true\nvllm_mode: server\n"
BAD_RECIPES = [
    # (what is wrong, extra YAML or override, substring the error must contain)
    ("unknown key", "learnin_rate: 1.0e-6\n", "did you mean 'learning_rate'"),
    ("unknown section key", "model: {name_or_pth: tiny}\n", "model.name_or_pth"),
    ("token-sum loss", "loss_type: dapo\n", "loss_type"),
    ("bnpo loss", "loss_type: bnpo\n", "loss_type"),
    ("dr_grpo loss", "loss_type: dr_grpo\n", "loss_type"),
    ("cispo loss", "loss_type: cispo\n", "loss_type"),
    ("on-policy GSPO", "steps_per_generation: 1\n", "allow_on_policy"),
    ("on-policy via accumulation", "gradient_accumulation_steps: 4\n", "on-policy"),
    ("indivisible generation batch", "num_generations: 3\n", "num_generations"),
    ("one generation", "num_generations: 1\n", "num_generations"),
    ("epsilon zero", "epsilon: 0\n", "epsilon"),
    ("epsilon negative", "epsilon: -0.1\n", "epsilon"),
    ("epsilon_high too big", "epsilon_high: 1.5\n", "epsilon_high"),
    ("not a number", "learning_rate: fast\n", "learning_rate"),
    ("unknown algorithm", "algorithm: ppo\n", "algorithm"),
    ("token level under gspo", "importance_sampling_level: token\n", "importance_sampling_level"),
    ("unknown reward", "rewards: [maths]\n", "rewards[0]"),
    ("bad reward path", "rewards: ['no_such_module.sub:fn']\n", "no_such_module"),
    ("bad reward parameter", "rewards: [{name: cosine, max_lenn: 10}]\n", "max_lenn"),
    ("explicit reward_weights", "reward_weights: [1.0]\n", "reward_weights"),
    ("both batch knobs", "generation_batch_size: 32\nsteps_per_generation: 4\n", "generation_batch_size"),
    ("empty rewards", "rewards: []\n", "rewards"),
    ("bad diagnostics key", "diagnostics: {buckets: [1]}\n", "diagnostics.buckets"),
    ("on-policy via replays", "gradient_accumulation_steps: 8\nnum_iterations: 2\n", "on-policy"),
    ("bad launch key", "launch: {gpus: 8}\n", "launch.gpus"),
    (
        "launch world size",
        "generation_batch_size: 32\nlaunch: {gpus_per_node: 3}\n",
        "3 processes): generation",
    ),
    ("launch zero nodes", "launch: {nodes: 0}\n", "launch.nodes"),
    ("launch server on 1 node", SERVER + "launch: {gpus_per_node: 8}\n", "no node"),
    ("launch bad cost", "launch: {seconds_per_step: [60, 30]}\n", "launch.seconds_per_step"),
    ("launch unknown config", "launch: {accelerate_config: configs/zero9.yaml}\n", "zero9"),
    (
        "launch server layout not the node's GPUs",
        SERVER + "launch: {nodes: 2, gpus_per_node: 8, server_tensor_parallel_size: 2}\n",
        "server node's launch.gpus_per_node (8)",
    ),
    (
        "launch command with another server layout",
        SERVER + "launch: {nodes: 2, gpus_per_node: 8, server_tensor_parallel_size: 2, "
        "server_data_parallel_size: 4, command: sbatch train.slurm --vllm-tp 4 --vllm-dp 2}\n",
        "--vllm-tp 2 --vllm-dp 4",
    ),
    (
        "launch command without its config",
        "launch: {accelerate_config: configs/zero2.yaml, command: gspo-trl train x.yaml}\n",
        "launch.command",
    ),
]


@pytest.mark.parametrize(("case", "extra", "message"), BAD_RECIPES, ids=[c[0] for c in BAD_RECIPES])
def test_bad_recipes_are_refused_naming_the_key(tmp_path: Path, case: str, extra: str, message: str) -> None:
    base = GOOD
    for line in extra.splitlines():  # a key given in `extra` replaces the one in GOOD
        key = line.split(":", 1)[0]
        base = (
            "\n".join(existing for existing in base.splitlines() if not existing.startswith(f"{key}:")) + "\n"
        )
    with pytest.raises(RecipeError, match=None) as caught:
        validate(load_recipe(write(tmp_path, base + extra)), processes=1)
    assert message in str(caught.value), f"{case}: {caught.value}"


def test_on_policy_gspo_allowed_only_with_explicit_opt_in(tmp_path: Path) -> None:
    validate(
        load_recipe(write(tmp_path, GOOD + "steps_per_generation: 1\nallow_on_policy: true\n")), processes=1
    )


def test_divisibility_counts_processes(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, GOOD + "steps_per_generation: 2\n"))
    validate(recipe, processes=1)  # 8 x 1 x 2 = 16, divisible by 4
    with pytest.raises(RecipeError, match="num_generations"):
        validate(
            load_recipe(write(tmp_path, GOOD.replace("num_generations: 4", "num_generations: 6"))),
            processes=1,
        )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("model: {name_or_path: tiny\n", "line"),  # unclosed flow mapping
        ("a: 1\n  b: 2\n", "line 2"),
        ("learning_rate: 1.0\nlearning_rate: 2.0\n", "duplicate key 'learning_rate'"),
        ("- just\n- a list\n", "must be a mapping"),
    ],
)
def test_yaml_problems_name_the_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_missing_recipe_file(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="file not found"):
        load_recipe(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "missing.yaml"], "missing.yaml: file not found"),
        (["train", str(TINY_RECIPE), "--loss_type", "dapo"], "loss_type"),
        (["validate", str(TINY_RECIPE), "--steps_per_generation", "1"], "allow_on_policy"),
        (["train", str(TINY_RECIPE), "--rewards", "[nope]"], "rewards[0]"),
        (["validate", str(TINY_RECIPE), "--data.path", "missing.jsonl"], "missing.jsonl"),
    ],
)
def test_cli_user_errors_exit_nonzero_without_traceback(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gspo_trl.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert message in result.stderr, result.stderr


def test_every_shipped_tiny_recipe_validates() -> None:
    validate(load_recipe(TINY_RECIPE), processes=1)


TINY_RECIPE = ROOT / "recipes" / "tiny" / "reversal.yaml"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [({"heldout.k": "[1, 4]"}, [1, 4]), ({"heldout.k": "[]"}, []), (["--heldout.k", "[2]"], [2])],
)
def test_a_list_written_as_text_is_read_as_a_list(overrides, expected) -> None:
    assert load_recipe(TINY_RECIPE, overrides).heldout.k == expected


@pytest.mark.parametrize("text", ["abc", "[1, 2", "{a: 1}"])
def test_text_that_is_no_list_is_refused_for_a_list_field(text) -> None:
    with pytest.raises(RecipeError, match=r"heldout\.k"):
        load_recipe(TINY_RECIPE, {"heldout.k": text})


def test_launch_world_size_is_checked_unless_launched_elsewhere(tmp_path: Path, monkeypatch) -> None:
    """`launch:` says 3 GPUs, where a 64-completion generation batch cannot split into micro-batches
    of 8 x 3: refused before a launch, but a real launch on 2 processes is checked at 2 only."""
    recipe = load_recipe(write(tmp_path, GOOD + "generation_batch_size: 64\nlaunch: {gpus_per_node: 3}\n"))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(RecipeError, match="3 processes"):
        validate(recipe)
    monkeypatch.setenv("WORLD_SIZE", "2")
    validate(recipe)
