"""`gspo-trl plan` on other GPUs than the recipe's: what it changed, said first; the rollout batch
kept by accumulation where the world size divides; the launch command last (issue 44, item 5)."""

from __future__ import annotations

import pytest

from gspo_trl.cli.main import main as gspo_trl_main

EIGHT_B = "qwen3-8b/math"  # launch: 2 nodes x 8 H100, server mode: 8 train, 512 completions
ON_TWO_A100 = [EIGHT_B, "--gpus-per-node", "2", "--gpu-type", "A100-80GB"]
ON_ONE_H200 = [
    EIGHT_B,
    "--nodes",
    "1",
    "--gpus-per-node",
    "1",
    "--gpu-type",
    "H200",
    "--vllm_mode",
    "colocate",
]
ON_THREE_H200 = [
    EIGHT_B,
    "--nodes",
    "1",
    "--gpus-per-node",
    "3",
    "--gpu-type",
    "H200",
    "--vllm_mode",
    "colocate",
]

# (argv, lines that must be among the report's first 4 after its title, a line its tail must hold)
CASES = {
    "a: nodes and server mode from the recipe, said first": (
        ON_TWO_A100,
        [
            "  changed   2 node(s) from launch.nodes (not named; give --nodes N)",
            "  changed   server mode from the recipe (vllm_mode: server): 1 node generates (node 2, "
            "`trl vllm-serve`, trains nothing), 1 train: 2 training processes of 4 GPUs",
        ],
        "Launch: sbatch --nodes=2 scripts/slurm/train.slurm --recipe ",
    ),
    "b: 1 H200 keeps the 1024-completion batch by accumulation": (
        ON_ONE_H200,
        [
            "  changed   rollout batch kept at 1024 completions (the recipe's on its launch: hardware), "
            "not shrunk to 64: gradient_accumulation_steps 2 -> 32, steps_per_generation 8 -> 128",
        ],
        "zero3.yaml --num_processes 1 -m gspo_trl.train --config ",
    ),
    "b: 2 A100 in server mode keep 512, not 128": (
        ON_TWO_A100,
        ["  changed   rollout batch kept at 512 completions", "gradient_accumulation_steps 2 -> 8"],
        "--gradient_accumulation_steps 8 --steps_per_generation 32",
    ),
    "b: 16 processes is no multiple of 3: said, not kept": (
        ON_THREE_H200,
        ["  changed   rollout batch 192 completions, not the recipe's 1024 on its launch: hardware"],
        "--num_processes 3 -m gspo_trl.train",
    ),
    "c: the recipe's own hardware prints its own command": (
        [EIGHT_B],
        [],
        "Launch (the recipe's launch.command): sbatch --nodes=2 scripts/slurm/train.slurm --model Qwen",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plan_says_what_it_changed_keeps_the_batch_and_prints_the_command(capsys, case):
    argv, first_lines, launch = CASES[case]
    gspo_trl_main(["plan", *argv])
    out = capsys.readouterr().out
    head = "\n".join(out.splitlines()[1:5])
    for expected in first_lines:
        assert expected in head, f"{expected!r} not in the first lines:\n{head}"
    if not first_lines:
        assert "changed" not in head, head  # nothing changed from the recipe's own launch:
    tail = "\n".join(out.splitlines()[-3:])
    assert launch in tail, f"{launch!r} not at the end:\n{tail}"


def test_kept_batch_is_what_the_plan_planned(capsys):
    """The batch line and the work line are the kept batch's (1024 completions, 4 updates), and a
    batch key the user names is theirs: no accumulation raised over it."""
    gspo_trl_main(["plan", *ON_ONE_H200])
    out = capsys.readouterr().out
    assert "generation batch 1024 = 64 groups of 16: ok" in out
    assert "4 optimizer update(s) per rollout batch: ok" in out
    gspo_trl_main(["plan", *ON_ONE_H200, "--gradient_accumulation_steps", "2"])
    out = capsys.readouterr().out
    assert "generation batch 64 = 4 groups of 16" in out and "rollout batch kept" not in out
