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
    ("BytedTsinghua-SIA/DAPO-Math-17k", None): "dapo-math-17k",
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
    if apply_preset(load_recipe(path).data).path == "open-r1/DAPO-Math-17k-Processed"
]
DAPO_MAPPING = ("path", "name", "prompt_column", "solution_column", "columns", "system_prompt")
"""The data keys that decide what a DAPO recipe's model is asked: the `dapo-math` preset's."""


DAPO_INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of the "
    "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n",
    '\n\nRemember to put your answer on its own line after "Answer:".',
)
"""DAPO's user message around the problem (tests/fixtures/datasets/README.md quotes its sources)."""


def test_dapo_fixture_prompt_is_the_bare_problem_and_source_prompt_wraps_it() -> None:
    """As published rows of open-r1/DAPO-Math-17k-Processed (en) show: `prompt` is the problem
    alone, `source_prompt` DAPO's message with the instruction around that same problem."""
    before, after = DAPO_INSTRUCTION
    for row in _read_jsonl(FIXTURES / "dapo-math.jsonl"):
        assert row["source_prompt"] == [{"content": before + row["prompt"] + after, "role": "user"}]


@pytest.mark.parametrize("path", DAPO_RECIPES)
def test_dapo_recipe_asks_for_one_answer_format_and_grades_both(path: Path) -> None:
    """The model sees DAPO's own message (its `Answer:` instruction) and nothing else about the
    format, not the bare `prompt`; the grader reads that line and \\boxed{} alike; the
    recipe's mapping and grader are the `dapo-math` preset's; the header says what is read."""
    recipe = load_recipe(path)
    preset = PRESETS["dapo-math"]
    preset_config = apply_preset(DataConfig(preset="dapo-math"))
    for key in DAPO_MAPPING:
        assert getattr(recipe.data, key) == getattr(preset_config, key), f"data.{key} differs from the preset"
    first = recipe.rewards[0]
    assert (first.spec, first.params) == (preset.reward, preset.reward_params)
    assert recipe.heldout is None or recipe.heldout.reward is None, "held-out would grade \\boxed{} only"

    config, _ = _fixture_config(recipe.data)
    train, _ = load_data(config)
    for row, messages in zip(_read_jsonl(FIXTURES / "dapo-math.jsonl"), train["prompt"], strict=True):
        assert messages == row["source_prompt"], "the prompt is not DAPO's own message"
        text = messages[0]["content"]
        assert "Answer: $Answer" in text and "\\boxed" not in text

    header = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    for phrase in ("`source_prompt`", "Answer: $Answer", "answer_format any", "dapo-math-17k"):
        assert phrase in header, f"the header does not say {phrase!r}"


DAPO_ANSWERS = ("correct_answer_line", "correct", "wrong")
"""The DAPO fixture's completions graded per row: `Answer: N`, `\\boxed{N}`, wrong in both."""


def _dapo_answers(gold: str) -> list[str]:
    """The three DAPO fixture completions of the row whose gold is `gold`."""
    rows = _read_jsonl(FIXTURES / "dapo-math.jsonl")
    completions = _read_jsonl(FIXTURES / "dapo-math.completions.jsonl")
    by_gold = {row["solution"]: completion for row, completion in zip(rows, completions, strict=True)}
    return [by_gold[gold][key] for key in DAPO_ANSWERS]


def _graded_as_the_trainer_grades(trainer: Any, rows: list[dict[str, Any]]) -> list[list[float]]:
    """Per row, the weighted reward sum of its DAPO_ANSWERS: GRPOTrainer._calculate_rewards
    (every reward the trainer built, called as in a step) times the trainer's reward_weights."""
    import torch

    tokenizer = trainer.processing_class
    totals = []
    for row in rows:
        texts = _dapo_answers(row["solution"])
        completion_ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
        per_func = trainer._calculate_rewards(
            [row] * len(texts), [row["prompt"]] * len(texts), [_assistant(t) for t in texts], completion_ids
        )
        weights = trainer.reward_weights.to(per_func.device).unsqueeze(0)
        totals.append(torch.nansum(per_func * weights, dim=1).tolist())
    return totals


@pytest.mark.parametrize("path", DAPO_RECIPES)
def test_dapo_recipe_scores_answer_line_and_boxed_alike(path: Path, tmp_path: Path, model_root: Path) -> None:
    """`Answer: 34` and `\\boxed{34}` score 1 and a wrong answer 0, through the rewards the
    trainer built from the recipe (with their weights) and through its held-out grader."""
    from gspo_trl.eval.pass_at_k import grade_samples
    from gspo_trl.training.build import build_trainer
    from gspo_trl.training.heldout.scoring import HeldoutCallback

    moe = "router_aux_loss_coef" in yaml.safe_load(path.read_text())
    model = _tiny_moe_dir(model_root) if moe else tiny_model_dir(model_root)
    trainer = build_trainer(load_recipe(path, _cpu_overrides(path, model, tmp_path / "out")))
    heldout = next((c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback)), None)
    rows = list(trainer.train_dataset) + (list(heldout.dataset) if heldout is not None else [])
    golds = [row["solution"] for row in _read_jsonl(FIXTURES / "dapo-math.jsonl")]
    assert sorted(row["solution"] for row in rows) == sorted(golds) and "34" in golds
    assert _graded_as_the_trainer_grades(trainer, rows) == [[1.0, 1.0, 0.0]] * len(rows)
    if heldout is not None:
        samples = [_dapo_answers(gold) for gold in heldout.dataset["solution"]]
        graded = grade_samples(heldout.grader, heldout.dataset, samples)
        assert graded.rewards == [[1.0, 1.0, 0.0]] * len(samples)


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
    """2 GSPO steps through gspo_trl.training.build.train_recipe: real schema, the recipe's own rewards,
    dtype and bf16 as the recipe sets them (a bfloat16 dtype is upcast without DeepSpeed)."""
    from gspo_trl.training.build import train_recipe

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    raw = yaml.safe_load(path.read_text())
    recipe = load_recipe(path)
    is_moe = "router_aux_loss_coef" in raw
    model = _tiny_moe_dir(model_root) if is_moe else tiny_model_dir(model_root)
    assert required_columns(recipe) <= {"solution", "tests", "entry_point"}

    with caplog.at_level(logging.INFO, logger="gspo_trl"):  # the CPU upcast is an INFO line
        trainer = train_recipe(load_recipe(path, _cpu_overrides(path, model, tmp_path / "out")))

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
