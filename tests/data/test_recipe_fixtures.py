"""Every shipped recipe and every preset, run on its dataset's real schema (tests/fixtures/datasets).

The GPU recipes name hub datasets this machine cannot download. The fixtures hold a few rows
of each in the hub's full column set, so what a recipe can get wrong about its data - a
rename onto a column that already exists, a gold column that is really a worked solution, a
prompt that asks for another answer format than the grader reads - fails here. For each
recipe and preset: its fixture loads through its own `data:` mapping (only `path` swapped,
and `eval_size` 0 as the fixtures have 3-5 rows), and its own first reward grades the
fixture's correct completion 1.0 and the wrong one below 1. Then each recipe trains 2 real
GSPO steps on the tiny model with that data, its rewards and its precision settings; only
what cannot run on CPU (vLLM, sizes) is overridden.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gspo_trl import rewards
from gspo_trl.config.data_checks import required_columns
from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections import DataConfig
from gspo_trl.data.loading import load_data
from gspo_trl.data.presets import PRESETS, apply_preset
from gspo_trl.data.sources import HUMANEVAL_SOURCE
from tests._gspo_helpers import single_torch_thread, tiny_model_dir  # noqa: F401 (autouse fixture)
from tests._paths import FIXTURES, ROOT

RECIPES = sorted((ROOT / "recipes").glob("**/*.yaml"))
RECIPE_IDS = [str(path.relative_to(ROOT / "recipes")) for path in RECIPES]
HUB_RECIPES = [path for path in RECIPES if not load_recipe(path).data.path.startswith("synthetic:")]

FIXTURE_OF_SOURCE = {
    ("openai/gsm8k", "main"): "gsm8k",
    ("HuggingFaceH4/MATH-500", None): "math500",
    ("open-r1/DAPO-Math-17k-Processed", "en"): "dapo-math",
    ("open-r1/OpenR1-Math-220k", "default"): "openr1-math",
    ("open-r1/verifiable-coding-problems-python", None): "verifiable-coding",
    ("agentica-org/DeepCoder-Preview-Dataset", "primeintellect"): "deepcoder-primeintellect",
    (HUMANEVAL_SOURCE, None): "humaneval",
}
"""(data.path, data.name) -> fixture file stem: the dataset configuration the fixture copies."""


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _fixture_config(config: DataConfig) -> tuple[DataConfig, str]:
    """The data section with its preset applied and `path` pointing at its fixture."""
    config = apply_preset(config)
    stem = FIXTURE_OF_SOURCE[(config.path, config.name)]
    return dataclasses.replace(config, path=str(FIXTURES / f"{stem}.jsonl"), eval_size=0), stem


def _cases() -> list[Any]:
    cases = []
    for path, case_id in zip(RECIPES, RECIPE_IDS, strict=True):
        recipe = load_recipe(path)
        if path in HUB_RECIPES:
            entry = recipe.rewards[0]
            cases.append(pytest.param(recipe.data, entry.spec, entry.params, id=case_id))
    for name, preset in sorted(PRESETS.items()):
        cases.append(pytest.param(DataConfig(preset=name), preset.reward, preset.reward_params, id=name))
    return cases


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(("data", "spec", "params"), _cases())
def test_fixture_loads_through_the_mapping_and_grades(
    data: DataConfig, spec: str, params: dict[str, Any]
) -> None:
    """Full real schema in, every row kept, the gold non-null, right = 1.0 and wrong < 1."""
    config, stem = _fixture_config(data)
    train, _ = load_data(config, required_columns=rewards.describe(spec).columns)
    raw = _read_jsonl(FIXTURES / f"{stem}.jsonl")
    assert len(train) == len(raw), "rows were dropped"
    assert len(set(train.column_names)) == len(train.column_names)
    assert len(train.column_names) >= len(raw[0]), f"columns lost: {sorted(raw[0])} -> {train.column_names}"
    for message_list in train["prompt"]:
        assert [m["role"] for m in message_list][-1] == "user", message_list
        assert all(isinstance(m["content"], str) and m["content"] for m in message_list)
    for column in rewards.describe(spec).columns:
        assert column in train.column_names, (column, train.column_names)
        assert all(value is not None for value in train[column]), column

    columns = {c: train[c] for c in train.column_names if c != "prompt"}
    grader = rewards.get(spec, **params)
    completions = _read_jsonl(FIXTURES / f"{stem}.completions.jsonl")
    right = grader([_assistant(c["correct"]) for c in completions], prompts=train["prompt"], **columns)
    wrong = grader([_assistant(c["wrong"]) for c in completions], prompts=train["prompt"], **columns)
    assert right == [1.0] * len(raw), f"{stem}: correct completions graded {right}"
    assert all(score is not None and score < 1.0 for score in wrong), f"{stem}: wrong graded {wrong}"


DAPO_RECIPES = [
    pytest.param(path, id=case_id)
    for path, case_id in zip(RECIPES, RECIPE_IDS, strict=True)
    if load_recipe(path).data.path == "open-r1/DAPO-Math-17k-Processed"
]


@pytest.mark.parametrize("path", DAPO_RECIPES)
def test_dapo_prompt_and_grader_ask_for_the_same_answer_format(path: Path) -> None:
    """DAPO-Math-17k-Processed's `prompt` is the bare problem: DAPO's "Answer: $Answer"
    instruction lives only in `source_prompt`. So the recipe's system prompt is the only
    format instruction the model sees; it must ask for the \\boxed{} answer the grader reads."""
    recipe = load_recipe(path)
    config, _ = _fixture_config(recipe.data)
    train, _ = load_data(config)
    raw = _read_jsonl(FIXTURES / "dapo-math.jsonl")
    assert recipe.data.prompt_column == "prompt", "the DAPO recipes read the bare problem"
    for row, messages in zip(raw, train["prompt"], strict=True):
        assert "Answer:" not in row["prompt"] and "Answer:" in row["source_prompt"][0]["content"]
        instructions = " ".join(m["content"] for m in messages if m["role"] == "system")
        assert "\\boxed{}" in instructions, "no system prompt asks for the \\boxed{} answer"
        assert "Answer:" not in " ".join(m["content"] for m in messages)
    first = recipe.rewards[0]
    assert first.spec == "math" and first.params.get("answer_format", "boxed") == "boxed"
    header = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert "source_prompt" in header and "\\boxed{}" in header, "the header does not say why"


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


def _cpu_overrides(path: Path, model: Path, output_dir: Path) -> list[str]:
    """Only what cannot run on CPU: vLLM off, small sizes; data.path -> the fixture."""
    recipe = load_recipe(path)
    overrides = [
        *("--model.name_or_path", str(model), "--use_vllm", "false", "--max_steps", "2"),
        *("--per_device_train_batch_size", "2", "--num_generations", "4"),
        *("--max_completion_length", "8", "--logging_steps", "1", "--save_strategy", "no"),
        *("--report_to", "none", "--output_dir", str(output_dir)),
    ]
    if path in HUB_RECIPES:
        config, _ = _fixture_config(recipe.data)
        overrides += ["--data.path", config.path]
    else:
        overrides += ["--data.num_rows", "64"]
    if recipe.data.eval_size:
        overrides += ["--data.eval_size", "1"]
    if recipe.heldout is not None:
        overrides += ["--heldout.max_rows", "1"]
    return overrides


@pytest.mark.slow
@pytest.mark.parametrize("path", RECIPES, ids=RECIPE_IDS)
def test_recipe_trains_two_steps_on_its_fixture(
    path: Path, tmp_path: Path, model_root: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """2 GSPO steps through gspo_trl.training.build.run: real schema, the recipe's own rewards,
    dtype and bf16 as the recipe sets them (a bfloat16 dtype is upcast without DeepSpeed)."""
    from gspo_trl.training.build import run

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    raw = yaml.safe_load(path.read_text())
    recipe = load_recipe(path)
    is_moe = "router_aux_loss_coef" in raw
    model = _tiny_moe_dir(model_root) if is_moe else tiny_model_dir(model_root)
    assert required_columns(recipe) <= {"solution", "tests", "entry_point"}

    with caplog.at_level(logging.WARNING, logger="gspo_trl"):
        trainer = run(load_recipe(path, _cpu_overrides(path, model, tmp_path / "out")))

    assert trainer.state.global_step == 2
    logged = {key for entry in trainer.state.log_history for key in entry}
    for entry in recipe.rewards:
        name = entry.spec.rsplit(":", 1)[-1]
        assert any(key.startswith("rewards/") and name in key for key in logged), (
            f"reward {entry.spec} was never logged: {sorted(logged)}"
        )
    trained = {p.dtype for p in trainer.model.parameters() if p.requires_grad}
    if recipe.model.dtype == "bfloat16" and not recipe.model.lora:
        assert trained == {__import__("torch").float32}, f"pure-bf16 weights trained: {trained}"
        assert "model.dtype" in caplog.text
    assert trainer.args.bf16 == bool(raw.get("bf16", False))
    if is_moe:
        assert trainer.aux_loss_enabled, "router aux loss not enabled on the MoE recipe"
        assert any("aux_loss" in key for key in logged), f"no aux_loss metric in {sorted(logged)}"
    if recipe.model.lora:
        assert type(trainer.model).__name__.startswith("Peft"), "LoRA recipe did not train a PEFT model"
