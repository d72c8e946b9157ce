"""Every recipe in recipes/ has its header, validates, and states its batch arithmetic right.

Loading each recipe's data on its dataset's real schema, grading it, and training 2 real
GSPO steps on CPU are in tests/data/test_recipe_fixtures.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import updates_per_rollout_batch, validate
from tests._paths import ROOT

RECIPES = sorted((ROOT / "recipes").glob("**/*.yaml"))
RECIPE_IDS = [str(path.relative_to(ROOT / "recipes")) for path in RECIPES]
HEADER_FIELDS = ("Hardware:", "Launch:", "Cost:", "Tracker:")


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
    tracker = recipe.training.get("report_to", "none")
    tracker = tracker if isinstance(tracker, str) else ", ".join(tracker)
    assert re.search(rf"# Tracker: +report_to: {re.escape(tracker)}\b", text), f"{path}: Tracker line"
    validate(recipe, processes=1)
    if recipe.training.get("save_strategy") == "steps":
        updates = updates_per_rollout_batch(recipe.training, processes=1)
        assert recipe.training["save_steps"] % updates == 0, (
            f"{path}: save_steps must be a multiple of {updates} (the optimizer steps of one rollout "
            "batch) for an exact --resume: the half-used rollout buffer is not checkpointed"
        )
    if recipe.data.path.startswith(("synthetic:", "/", ".")):
        return
    documented = [recipe.data.prompt_column, recipe.data.solution_column, *recipe.data.columns]
    for column in filter(None, documented):
        assert f"`{column}`" in text, f"{path}: header does not document column {column!r}"


ROLLOUT_LINE = re.compile(
    r"Rollout batch = (?P<per_device>\d+) per (?:GPU|process) x (?P<processes>\d+) (?:GPUs?|process(?:es)?) "
    r"x (?P<steps>\d+) micro-batches = (?P<total>\d+) completions = (?P<prompts>\d+) prompts "
    r"x (?P<group>\d+); (?P<updates>\d+) optimizer updates"
)
ZERO3_MAX_MICRO_BATCH_TOKENS = 8 * 8192
"""Completion tokens per GPU micro-batch a ZeRO-3 recipe may ask for: 8 x 8k already means
~20 GB of bf16 logits over Qwen3's 152k vocabulary next to the gathered layers."""


@pytest.mark.parametrize("path", RECIPES, ids=RECIPE_IDS)
def test_header_batch_arithmetic_matches_the_recipe(path: Path) -> None:
    """The header's rollout line is the recipe's own arithmetic (TRL: generation batch =
    per_device_train_batch_size x processes x steps_per_generation micro-batches; each
    optimizer step takes gradient_accumulation_steps of them), GSPO's 4 updates hold, and
    every completion count the header quotes is that rollout batch."""
    text = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    match = ROLLOUT_LINE.search(text)
    assert match, f"{path}: no 'Rollout batch = ...' line in the format {ROLLOUT_LINE.pattern}"
    stated = {key: int(value) for key, value in match.groupdict().items()}
    training = load_recipe(path).training
    processes = stated["processes"]
    assert stated["per_device"] == training["per_device_train_batch_size"]
    assert stated["steps"] == training["steps_per_generation"]
    assert stated["total"] == stated["per_device"] * processes * stated["steps"]
    assert stated["total"] == stated["prompts"] * stated["group"]
    assert stated["group"] == training["num_generations"]
    assert stated["updates"] == updates_per_rollout_batch(training, processes) == 4
    quoted = {int(n) for n in re.findall(r"(\d+) completions", text)}
    assert quoted == {stated["total"]}, f"{path}: header quotes {quoted} completions per rollout batch"
    if "configs/zero3.yaml" in text:
        tokens = training["per_device_train_batch_size"] * training["max_completion_length"]
        assert tokens <= ZERO3_MAX_MICRO_BATCH_TOKENS, f"{path}: {tokens} completion tokens per micro-batch"


QWEN3_RECIPES = [pytest.param(p, id=i) for p, i in zip(RECIPES, RECIPE_IDS, strict=True) if "qwen3" in i]


@pytest.mark.parametrize("path", QWEN3_RECIPES)
def test_qwen3_recipes_decide_thinking_mode_and_vllm_memory_and_say_why(path: Path) -> None:
    """Qwen3 thinks by default; at a 4k/8k cap that is a decision, so each recipe makes it
    (chat_template_kwargs, a GRPOConfig field) and its header says why. A colocated engine in
    sleep mode frees its memory while the trainer steps, so 0.3 of the GPU is needlessly few
    sequences per generation wave."""
    recipe = load_recipe(path)
    text = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert "enable_thinking" in (recipe.training.get("chat_template_kwargs") or {})
    assert "# Thinking:" in text and f"past {recipe.training['max_completion_length'] // 1024}k" in text
    if recipe.training.get("vllm_mode") == "colocate" and recipe.training.get("vllm_enable_sleep_mode"):
        utilization = recipe.training["vllm_gpu_memory_utilization"]
        assert 0.5 <= utilization <= 0.6
        assert f"# Memory:   vllm_gpu_memory_utilization {utilization}:" in text
    assert "score None" not in text, "the code reward runs function-call tests; nothing scores None"
