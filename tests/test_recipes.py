"""Every recipe in recipes/ loads, validates, and trains 2 real GSPO steps on CPU.

The GPU recipes name hub models and datasets this machine cannot download, so the 2-step
run swaps in the tiny model (a tiny Qwen3-MoE for the MoE recipe, so its router aux loss
is really computed) and a local JSONL file written with the recipe's *own* column names.
That keeps what a recipe can get wrong on its own - column mapping, reward names and
parameters, LoRA settings, batch divisibility, GSPO validation - inside the test; only
the sizes that need GPUs (batch, lengths, vLLM) are overridden.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from _gspo_helpers import tiny_model_dir

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / "recipes").glob("**/*.yaml"))
RECIPE_IDS = [str(path.relative_to(ROOT / "recipes")) for path in RECIPES]
HEADER_FIELDS = ("Hardware:", "Launch:", "Cost:")

SAMPLE_VALUES: dict[str, Any] = {
    "prompt": "What is 2 + 3? Put the answer in \\boxed{}.",
    "solution": "5",
    "tests": json.dumps([{"input": "2 3\n", "output": "5\n", "type": "stdin_stdout"}]),
    "entry_point": "add",
}
"""A plausible value for each column the data layer or a reward reads (by target name)."""


def test_recipes_exist() -> None:
    """Issue 5's recipe set is present: dense 0.6B-8B and MoE maths, code, LoRA, tiny."""
    names = set(RECIPE_IDS)
    for expected in (
        "qwen3-0.6b/math.yaml",
        "qwen3-1.7b/math.yaml",
        "qwen3-4b/math.yaml",
        "qwen3-8b/math.yaml",
        "qwen3-30b-a3b/math.yaml",
        "qwen3-1.7b/code.yaml",
        "qwen3-4b/math-lora.yaml",
        "tiny/reversal.yaml",
    ):
        assert expected in names, f"recipes/{expected} is missing"


@pytest.mark.parametrize("path", RECIPES, ids=RECIPE_IDS)
def test_recipe_header_and_validation(path: Path) -> None:
    """Header comment (what, hardware, launch, cost) and all validation checks pass, no data."""
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    text = "\n".join(header)
    for field in HEADER_FIELDS:
        assert field in text, f"{path}: header comment lacks {field!r}"
    assert "gspo_trl.train" in text or "gspo-trl train" in text or "train.slurm" in text
    recipe = load_recipe(path)
    validate(recipe, processes=1)
    if recipe.training.get("save_strategy") == "steps":
        generate_every = recipe.training["steps_per_generation"] * recipe.training.get("num_iterations", 1)
        assert recipe.training["save_steps"] % generate_every == 0, (
            f"{path}: save_steps must be a multiple of {generate_every} (a rollout batch) for an "
            "exact --resume: the half-used rollout buffer is not checkpointed"
        )
    if recipe.data.path.startswith(("synthetic:", "/", ".")):
        return
    documented = [recipe.data.prompt_column, recipe.data.solution_column, *recipe.data.columns]
    for column in filter(None, documented):
        assert f"`{column}`" in text, f"{path}: header does not document column {column!r}"


def _column_values(recipe_data: Any) -> dict[str, Any]:
    """Source column name -> sample value, following the recipe's own mapping."""
    columns = {recipe_data.prompt_column: SAMPLE_VALUES["prompt"]}
    if recipe_data.solution_column:
        columns[recipe_data.solution_column] = SAMPLE_VALUES["solution"]
    for source, target in recipe_data.columns.items():
        columns[source] = SAMPLE_VALUES[target]
    return columns


def _write_local_data(recipe_path: Path, directory: Path, rows: int = 24) -> Path:
    """A JSONL file with the recipe's source columns plus the reward columns it reads as is."""
    recipe = load_recipe(recipe_path)
    row = _column_values(recipe.data)
    from gspo_trl.config.validation import required_columns

    mapped = {recipe.data.columns.get(c, c) for c in row} | {"prompt", "solution"}
    for column in required_columns(recipe) - mapped:
        row[column] = SAMPLE_VALUES[column]
    path = directory / "data.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for _ in range(rows)))
    return path


def _tiny_moe_dir(root: Path) -> Path:
    """A 2-layer Qwen3-MoE (4 experts, top-2) sharing the tiny model's tokenizer."""
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    path = root / "tiny-moe"
    if (path / "config.json").exists():
        return path
    dense = tiny_model_dir(root)
    tokenizer = AutoTokenizer.from_pretrained(dense)
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        num_experts=4,
        num_experts_per_tok=2,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    Qwen3MoeForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    shutil.copy(dense / "chat_template.jinja", path / "chat_template.jinja")
    return path


@pytest.fixture(scope="module")
def model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("recipe-models")


@pytest.mark.slow
@pytest.mark.parametrize("path", RECIPES, ids=RECIPE_IDS)
def test_recipe_trains_two_steps_on_cpu(
    path: Path, tmp_path: Path, model_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 GSPO steps through gspo_trl.train.run with the recipe's data mapping and rewards."""
    from gspo_trl.training.build import run

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    raw = yaml.safe_load(path.read_text())
    recipe = load_recipe(path)
    is_moe = raw.get("router_aux_loss_coef")
    model = _tiny_moe_dir(model_root) if is_moe else tiny_model_dir(model_root)
    overrides = [
        *("--model.name_or_path", str(model), "--model.dtype", "float32"),
        *("--use_vllm", "false", "--max_steps", "2", "--per_device_train_batch_size", "4"),
        *("--num_generations", "4", "--max_completion_length", "8", "--logging_steps", "1"),
        *("--report_to", "none", "--output_dir", str(tmp_path / "out")),
    ]
    if not recipe.data.path.startswith("synthetic:"):
        data = _write_local_data(path, tmp_path)
        overrides += ["--data.path", str(data), "--data.name", "null"]
    else:
        overrides += ["--data.num_rows", "64"]
    if recipe.data.eval_size:
        overrides += ["--data.eval_size", "4"]
    if "heldout" in raw:
        overrides += ["--heldout.max_rows", "4"]

    trainer = run(load_recipe(path, overrides))

    assert trainer.state.global_step == 2
    logged = {key for entry in trainer.state.log_history for key in entry}
    for entry in recipe.rewards:
        name = entry.spec.rsplit(":", 1)[-1]
        assert any(key.startswith("rewards/") and name in key for key in logged), (
            f"reward {entry.spec} was never logged: {sorted(logged)}"
        )
    if is_moe:
        assert trainer.aux_loss_enabled, "router aux loss not enabled on the MoE recipe"
        assert any("aux_loss" in key for key in logged), f"no aux_loss metric in {sorted(logged)}"
    if recipe.model.lora:
        assert type(trainer.model).__name__.startswith("Peft"), "LoRA recipe did not train a PEFT model"
