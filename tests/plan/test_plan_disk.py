"""`gspo-trl plan` reports checkpoint disk: bytes per checkpoint and at the peak.

The bytes per parameter follow what transformers' Trainer and DeepSpeed write into a checkpoint
(gspo_trl/plan/disk.py quotes them); the 30B-A3B header's Disk line is pinned to the plan's
figures, and the fp32 weights of bf16 runs without DeepSpeed to the trainer's own rule.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.plan.disk import checkpoints_at_peak, plan_disk
from gspo_trl.plan.memory import lora_adapter_params
from gspo_trl.plan.planner import plan
from gspo_trl.plan.recipe_plan import plan_recipe
from gspo_trl.plan.topology import resolve_topology
from tests._paths import ROOT

MOE_RECIPE = ROOT / "recipes/qwen3-30b-a3b/math.yaml"


def header_entry(path: Path, name: str) -> str:
    """A `# Name:` entry of the recipe's opening comment, its continuation lines joined."""
    found = re.search(rf"^# {name}:(.*\n(?:#   .*\n)*)", path.read_text(), flags=re.MULTILINE)
    assert found, f"{path} has no `# {name}:` header entry"
    return " ".join(line.lstrip("#").strip() for line in found.group(1).splitlines())


def recipe_disk(path: Path):
    recipe = load_recipe(path)
    result = plan_recipe(recipe, resolve_topology(dict(recipe.training), recipe.launch))
    return plan_disk(result.plan.shape, result.plan.setup, recipe.training, recipe.model.allow_pure_bf16)


@pytest.mark.parametrize(
    ("strategy", "lora", "bytes_per_param"),
    [
        ("zero3", None, 14),  # bf16 model.safetensors (zero3_save_16bit_model) + 12 fp32 optimizer
        ("zero2", None, 16),  # + the bf16 module in mp_rank_00_model_states.pt
        ("ddp", None, 12),  # fp32 weights (bf16 upcast, no fp32 masters) + 2 fp32 moments
        ("fsdp2", None, 12),
    ],
)
def test_bytes_per_parameter_by_strategy(strategy, lora, bytes_per_param):
    result = plan({"use_vllm": False}, "Qwen/Qwen3-8B", strategy=strategy, dtype="bfloat16")
    disk = plan_disk(
        result.shape, result.setup, {"save_strategy": "steps", "save_steps": 10, "max_steps": 100}
    )
    assert disk.per_checkpoint == bytes_per_param * result.shape.total_params


def test_pure_bf16_ddp_keeps_bf16_weights_and_moments():
    result = plan({}, "Qwen/Qwen3-0.6B", strategy="ddp", dtype="bfloat16")
    disk = plan_disk(result.shape, result.setup, {}, pure_bf16=True)
    assert disk.per_checkpoint == 6 * result.shape.total_params


def test_ddp_weights_dtype_matches_what_the_trainer_loads():
    """disk.py counts fp32 for bf16 full fine-tuning without DeepSpeed: the trainer's own rule."""
    from gspo_trl.training.build import _weights_dtype

    recipe = load_recipe(ROOT / "recipes/qwen3-0.6b/math.yaml")
    assert recipe.model.dtype == "bfloat16" and not recipe.model.lora
    assert _weights_dtype(recipe, "bfloat16") == "float32"


def test_lora_saves_adapters_only():
    result = plan({}, "Qwen/Qwen3-4B", strategy="ddp", lora={"r": 32, "target_modules": "all-linear"})
    disk = plan_disk(result.shape, result.setup, {})
    adapters = lora_adapter_params(result.shape, result.setup.lora)
    assert disk.per_checkpoint == 12 * adapters  # fp32 adapters + 2 fp32 moments; the base is not saved
    assert adapters < 0.02 * result.shape.total_params


@pytest.mark.parametrize(
    ("training", "held"),
    [
        ({"save_strategy": "no"}, 0),
        ({"save_steps": 20, "max_steps": 200, "save_total_limit": 2}, 3),  # + the one in .staging
        ({"save_steps": 100, "max_steps": 200, "save_total_limit": 3}, 2),  # only 2 saves ever
        ({"save_steps": 20, "max_steps": 200}, 10),  # no limit: every save kept
        ({"save_strategy": "epoch", "save_total_limit": 1}, 2),
        ({"save_strategy": "epoch"}, None),  # unbounded
    ],
)
def test_checkpoints_on_disk_at_the_peak(training, held):
    assert checkpoints_at_peak(training)[0] == held


def test_the_30b_header_disk_line_is_the_plans_figure():
    """Fails when the recipe (save_total_limit, strategy) or the disk model changes and the header
    does not: ~0.43 TB per checkpoint, 1.28 TB at the peak, and its parts in GB."""
    disk = recipe_disk(MOE_RECIPE)
    line = header_entry(MOE_RECIPE, "Disk")
    per = re.search(r"~(\d+\.\d+) TB per checkpoint", line)
    peak = re.search(r"(\d+\.\d+) TB at peak: save_total_limit (\d+)", line)
    assert per and peak, line
    assert float(per.group(1)) == round(disk.per_checkpoint / 1e12, 2)
    assert float(peak.group(1)) == round(disk.total / 1e12, 2)
    assert int(peak.group(2)) == load_recipe(MOE_RECIPE).training["save_total_limit"]
    parts = [int(gb) for gb in re.findall(r"(\d+) GB", line)]
    assert parts == [round(part.bytes / 1e9) for part in disk.parts]


def test_plan_cli_prints_the_disk_section():
    result = subprocess.run(
        [sys.executable, "-m", "gspo_trl.cli.main", "plan", str(MOE_RECIPE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Disk for checkpoints (estimate)" in result.stdout, result.stdout + result.stderr
    assert re.search(r"per checkpoint\s+427 GB", result.stdout)
    assert re.search(r"total at peak\s+1\.28 TB\s+3 x \(save_total_limit 2", result.stdout)
