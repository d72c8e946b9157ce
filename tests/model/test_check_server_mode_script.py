"""scripts/check_server_mode.py (the slow server-mode proofs: 2 ranks, ZeRO-3, Ctrl-C, server
death): its runs are valid server-mode recipes and it reads TRL's per-rollout gap (seconds)."""

from __future__ import annotations

import json

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate
from tests._scripts import load_script

script = load_script("check_server_mode")


def test_its_recipes_are_valid_server_mode_recipes(tmp_path):
    data = script.recipe(tmp_path / "tiny", "http://127.0.0.1:8000", tmp_path / "run", save_steps=2)
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(data))
    recipe = load_recipe(path)
    validate(recipe)
    assert recipe.training["vllm_mode"] == "server" and recipe.training["vllm_importance_sampling_correction"]


def test_it_reads_one_gap_per_rollout_batch(tmp_path):
    rows = [
        {"step": 1, script.GAP: 9.5e-7, "loss": 0.1},
        {"step": 2, "loss": 0.2},
        {"step": 3, script.GAP: 4e-7},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert script.gaps(tmp_path) == {1: 9.5e-7, 3: 4e-7}


def test_the_two_rank_launch_is_accelerates(tmp_path):
    command = script.train_command(tmp_path / "r.yaml", ["--config_file", "cpu_2proc.yaml"])
    assert command[1:3] == ["-m", "accelerate.commands.launch"]
    assert command[-4:] == ["-m", "gspo_trl.train", "--config", str(tmp_path / "r.yaml")]
