"""What the plan changed from what the user named, and the command that launches what it planned.

A plan on other GPUs than the recipe's `launch:` hardware must say up front what it took from
the recipe (nodes, server mode: one node generates and trains nothing) and why. Fewer training
processes would shrink the rollout batch (TRL: per-device batch x processes x
steps_per_generation), which changes the algorithm, not just the speed; so where the recipe's
batch is a whole multiple of this world size, the plan keeps it by raising
gradient_accumulation_steps and steps_per_generation alike (same micro-batch, so the same memory
per GPU, and the same optimizer updates per rollout batch). The report ends with the command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gspo_trl.config.batch import rollout_batch
from gspo_trl.config.shipped import find_accelerate_config
from gspo_trl.plan.topology import Topology

BATCH_KEYS = ("gradient_accumulation_steps", "steps_per_generation", "generation_batch_size")
HARDWARE_FLAGS = ("nodes", "gpus-per-node", "gpu-memory", "gpu-type", "accelerate-config")


@dataclass(frozen=True)
class KeptBatch:
    """The rollout batch kept on fewer training processes: the raised keys and why."""

    training: dict[str, Any]
    overrides: dict[str, int] = field(default_factory=dict)
    note: str | None = None


def keep_rollout_batch(training: dict[str, Any], own: Topology | None, here: Topology) -> KeptBatch:
    """Raise accumulation so `here` trains on the rollout batch the recipe has on `own` (its
    `launch:` hardware); unchanged when the batch does not shrink or the keys are set by hand."""
    if own is None or own.world_size <= here.world_size or training.get("generation_batch_size"):
        return KeptBatch(training)
    recipe_batch = rollout_batch(training, own.world_size, allow_partial_groups=True)
    shrunk = rollout_batch(training, here.world_size, allow_partial_groups=True)
    factor = Fraction(own.world_size, here.world_size)
    accumulation = int(training.get("gradient_accumulation_steps") or 1)
    steps = int(training.get("steps_per_generation") or accumulation)
    if (accumulation * factor).denominator != 1 or (steps * factor).denominator != 1:
        note = (
            f"rollout batch {shrunk.generation_batch_size} completions, not the recipe's "
            f"{recipe_batch.generation_batch_size} on its launch: hardware (accumulation {accumulation} "
            f"and steps_per_generation {steps} x {own.world_size}/{here.world_size} training processes "
            "are not whole numbers, so accumulation cannot keep it)"
        )
        return KeptBatch(training, note=note)
    raised = {
        "gradient_accumulation_steps": int(accumulation * factor),
        "steps_per_generation": int(steps * factor),
    }
    note = (
        f"rollout batch kept at {recipe_batch.generation_batch_size} completions (the recipe's on its "
        f"launch: hardware), not shrunk to {shrunk.generation_batch_size}: gradient_accumulation_steps "
        f"{accumulation} -> {raised['gradient_accumulation_steps']}, steps_per_generation {steps} -> "
        f"{raised['steps_per_generation']} for {here.world_size} training process(es) instead of "
        f"{own.world_size}; same micro-batch (memory per GPU) and updates per rollout batch, "
        f"{float(factor):g}x the time per update"
    )
    return KeptBatch({**training, **raised}, raised, note)


def named_keys(overrides: list[str]) -> set[str]:
    """The recipe keys a command line sets: `--key value` or `--key=value` -> `key`."""
    return {item[2:].split("=", 1)[0] for item in overrides if item.startswith("--")}


def change_lines(topology: Topology, named_flags: set[str], kept_note: str | None) -> list[str]:
    """`  changed   ...` lines: each thing the plan took from the recipe over what was named."""
    lines = []
    sources = topology.sources
    if not named_flags & set(HARDWARE_FLAGS):
        return [f"  changed   {kept_note}"] if kept_note else []  # the recipe's own hardware
    for what, count in (("nodes", topology.nodes), ("gpus", topology.gpus_per_node)):
        if not sources[what].startswith("--"):
            flag = "--nodes N" if what == "nodes" else "--gpus-per-node G"
            noun = "node(s)" if what == "nodes" else "GPU(s) per node"
            lines.append(f"{count} {noun} from {sources[what]} (not named; give {flag})")
    if topology.server_mode:
        lines.append(
            f"server mode from the recipe (vllm_mode: server): 1 node generates (node {topology.vllm_node}, "
            f"`trl vllm-serve`, trains nothing), {topology.training_nodes} train: {topology.world_size} "
            f"training processes of {topology.total_gpus} GPUs (all train with --vllm_mode colocate)"
        )
    if kept_note:
        lines.append(kept_note)
    return [f"  changed   {line}" for line in lines]


def server_layout(gpus: int, tensor_parallel: int | None, data_parallel: int | None) -> tuple[int, int]:
    """The recipe's vLLM TP x DP when it fills the node's `gpus`, else the TP (or 1) that divides
    them and as many replicas as fit: `trl vllm-serve` needs TP x DP GPUs on its node."""
    tp = tensor_parallel or 1
    if data_parallel and tp * data_parallel == gpus:
        return tp, data_parallel
    tp = tp if tp <= gpus and gpus % tp == 0 else 1
    return tp, gpus // tp


def launch_command(
    recipe: str,
    topology: Topology,
    accelerate_config: str | None,
    overrides: list[str],
    server: tuple[int | None, int | None] = (None, None),
) -> str:
    """The command that starts the planned run: the slurm script in server mode (`server`: the
    recipe's vLLM TP and DP), else `accelerate launch` (on each node: --machine_rank, --main_process_ip)."""
    extra = " ".join(overrides)
    config = accelerate_config
    if config is not None:
        resolved = find_accelerate_config(config)
        config = str(resolved.resolve()) if resolved is not None else config
    if topology.server_mode:
        with_config = f" --config {config}" if config else ""
        tp, dp = server_layout(topology.gpus_per_node, *server)
        return (
            f"sbatch --nodes={topology.nodes} scripts/slurm/train.slurm --recipe {recipe}{with_config} "
            f"--gpus-per-node {topology.gpus_per_node} --vllm-tp {tp} --vllm-dp {dp}"
            + (f" -- {extra}" if extra else "")
        )
    if topology.world_size == 1 and not config:
        return f"gspo-trl train {recipe}" + (f" {extra}" if extra else "")
    with_config = f"--config_file {config} " if config else ""
    machines = f"--num_machines {topology.nodes} " if topology.nodes > 1 else ""
    command = (
        f"accelerate launch {with_config}{machines}--num_processes {topology.world_size} "
        f"-m gspo_trl.train --config {recipe}" + (f" {extra}" if extra else "")
    )
    if topology.nodes > 1:
        command += "   (on each node, with --machine_rank R --main_process_ip HOST)"
    return command
