"""Every recipe in recipes/ has its header and `launch:`, validates, and states its batch arithmetic
as gspo_trl.config.batch computes it.

Loading each recipe's data on its dataset's real schema, grading it, and training 2 real
GSPO steps on CPU are in tests/data/test_recipe_fixtures.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gspo_trl.config.batch import rollout_batch
from gspo_trl.config.defaults import GSPO_DEFAULTS
from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate
from gspo_trl.plan.topology import resolve_topology
from tests._paths import ROOT

RECIPES = sorted((ROOT / "recipes").glob("**/*.yaml"))
RECIPE_IDS = [str(path.relative_to(ROOT / "recipes")) for path in RECIPES]
HEADER_FIELDS = ("Tracker:", "Mismatch:")
GSPO_UPDATES = GSPO_DEFAULTS["steps_per_generation"] // GSPO_DEFAULTS["gradient_accumulation_steps"]


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
    """Header comment, a `launch:` with its command and cost, and all validation checks pass, no data."""
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    text = "\n".join(header)
    for field in HEADER_FIELDS:
        assert field in text, f"{path}: header comment lacks {field!r}"
    recipe = load_recipe(path)
    launch = recipe.launch
    assert launch is not None and launch.command and launch.seconds_per_step, f"{path}: launch:"
    assert any(entry in launch.command for entry in ("gspo_trl.train", "gspo-trl train", "train.slurm"))
    assert f"recipes/{path.relative_to(ROOT / 'recipes')}" in launch.command
    assert launch.gpus == (launch.gpu_memory_gb is not None) == ("qwen3" in str(path))
    tracker = recipe.training.get("report_to", "none")
    tracker = tracker if isinstance(tracker, str) else ", ".join(tracker)
    assert re.search(rf"# Tracker: +report_to: {re.escape(tracker)}\b", text), f"{path}: Tracker line"
    correction = recipe.engine.correction
    trl = str(bool(recipe.training.get("vllm_importance_sampling_correction"))).lower()
    mismatch = rf"# Mismatch: +engine.correction: {correction}, vllm_importance_sampling_correction: {trl}\b"
    assert re.search(mismatch, text), f"{path}: the Mismatch line must say what the recipe corrects"
    validate(recipe, processes=1)
    if recipe.training.get("save_strategy") == "steps":
        updates = rollout_batch(recipe.training, 1).optimizer_updates
        assert recipe.training["save_steps"] % updates == 0, (
            f"{path}: save_steps must be a multiple of {updates} (the optimizer steps of one rollout "
            "batch) for an exact --resume: the half-used rollout buffer is not checkpointed"
        )
    if recipe.data.path.startswith(("synthetic:", "/", ".")):
        return
    documented = [recipe.data.prompt_column, recipe.data.solution_column, *recipe.data.columns]
    for column in filter(None, documented):
        assert f"`{column}`" in text, f"{path}: header does not document column {column!r}"


ZERO3_MAX_MICRO_BATCH_TOKENS = 8 * 8192
"""Completion tokens per GPU micro-batch a ZeRO-3 recipe may ask for: 8 x 8k already means
~20 GB of bf16 logits over Qwen3's 152k vocabulary next to the gathered layers."""


def header_batch_line(path: Path) -> str:
    """The batch line `path`'s header must carry: the module's own words for its rollout batch
    at the world size its `launch:` trains on (what `gspo-trl plan` plans)."""
    recipe = load_recipe(path)
    world = resolve_topology(recipe.training, recipe.launch).world_size
    unit = "GPU" if recipe.launch is not None and recipe.launch.gpus else "process"
    return "# " + rollout_batch(recipe.training, world).describe(unit)


@pytest.mark.parametrize("path", RECIPES, ids=RECIPE_IDS)
def test_header_batch_arithmetic_is_the_batch_module(path: Path) -> None:
    """The header's rollout line is generated here from the recipe's keys and `launch:` (TRL's
    arithmetic, gspo_trl.config.batch), so editing either alone fails; GSPO's 4 updates hold;
    every completion count the header quotes is that rollout batch; a ZeRO-3 micro-batch stays
    within the tokens the recipe notes say fit."""
    expected = header_batch_line(path)
    lines = path.read_text().splitlines()
    assert expected in lines, f"{path}: the header's batch line must read\n{expected}"
    recipe = load_recipe(path)
    world = resolve_topology(recipe.training, recipe.launch).world_size
    batch = rollout_batch(recipe.training, world)
    assert batch.optimizer_updates == GSPO_UPDATES and not batch.on_policy
    text = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
    quoted = {int(n) for n in re.findall(r"(\d+) completions", text)}
    assert quoted == {batch.generation_batch_size}, (
        f"{path}: header quotes {quoted} completions per rollout batch"
    )
    if recipe.launch.accelerate_config == "configs/zero3.yaml":
        tokens = recipe.training["per_device_train_batch_size"] * recipe.training["max_completion_length"]
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


def scaling_table() -> dict[str, list[str]]:
    """docs/scaling.md's recipe table: recipe file -> its cells (model, hardware, config, data)."""
    rows = {}
    for line in (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells and cells[0].startswith("`recipes/"):
            rows[cells[0].strip("`").removeprefix("recipes/")] = cells[1:]
    return rows


@pytest.mark.parametrize("path", RECIPES, ids=RECIPE_IDS)
def test_scaling_doc_table_is_the_launch_section(path: Path) -> None:
    """The docs' recipe table restates each `launch:` (hardware, strategy); it must agree with it."""
    from gspo_trl.plan.launch import read_accelerate_config

    row = scaling_table().get(str(path.relative_to(ROOT / "recipes")))
    assert row is not None, f"docs/scaling.md has no row for {path}"
    _, hardware, config, _ = row
    recipe = load_recipe(path)
    launch = recipe.launch
    if not launch.gpus:
        assert "CPU" in hardware
    elif launch.nodes > 1:
        trains = resolve_topology(recipe.training, launch).training_nodes
        assert hardware.startswith(f"{launch.nodes} nodes ({trains} train + 1 vLLM)"), hardware
    else:
        assert hardware == f"{launch.gpus_per_node} x {launch.gpu_memory_gb:g} GB", hardware
    strategy = (
        read_accelerate_config(launch.accelerate_config).strategy if launch.accelerate_config else "none"
    )
    assert config.split(" / ")[0] == strategy, config
