"""Reading a topology: header lines, accelerate configs, and which source wins."""

from __future__ import annotations

import pytest

from gspo_trl.config.shipped import shipped_recipes
from gspo_trl.plan import PlanError
from gspo_trl.plan.launch import (
    Hardware,
    RecipeHeader,
    launch_config,
    parse_cost_minutes,
    parse_gpu_memory,
    parse_hardware,
    read_accelerate_config,
    read_header,
)
from gspo_trl.plan.topology import resolve_topology


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 node, 8 x 80 GB GPUs (H100/A100); DDP", Hardware(1, 8, 80.0)),
        ("2 nodes of 8 x 80 GB GPUs: node 1 trains", Hardware(2, 8, 80.0)),
        ("4 nodes of 8 x 141 GB GPUs", Hardware(4, 8, 141.0)),
        ("1 x 80 GB GPU (or more with configs/ddp.yaml)", Hardware(1, 1, 80.0)),
        ("any CPU, 2 cores are enough; no GPU", None),
        ("", None),
    ],
)
def test_parse_hardware(text, expected):
    assert parse_hardware(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("estimate, not measured: ~1 min/step (512 completions)", (1.0, 1.0)),
        ("~1.5-2 min/step", (1.5, 2.0)),
        ("~8-10 min/step, 200 steps ~ 1.5 days", (8.0, 10.0)),
        ("about 30 s/step", (0.5, 0.5)),
        ("about 0.1 s per step on 2 cores", None),
        (None, None),
    ],
)
def test_parse_cost_minutes(text, expected):
    assert parse_cost_minutes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "accelerate launch --config_file configs/zero2.yaml -m gspo_trl.train --config recipes/x.yaml",
            "configs/zero2.yaml",
        ),
        (
            "sbatch train.slurm --recipe recipes/qwen3-8b/math.yaml --config configs/zero3.yaml",
            "configs/zero3.yaml",
        ),
        ("accelerate launch -m gspo_trl.train --config recipes/tiny/reversal.yaml", None),
        ("gspo-trl train recipes/qwen3-4b/math-lora.yaml", None),
    ],
)
def test_launch_config_skips_recipes(text, expected):
    assert launch_config(text) == expected


@pytest.mark.parametrize(
    ("name", "strategy", "machines", "processes"),
    [
        ("configs/ddp.yaml", "ddp", 1, 8),
        ("configs/zero2.yaml", "zero2", 1, 8),
        ("configs/zero3.yaml", "zero3", 1, 8),
        ("configs/fsdp2.yaml", "fsdp2", 1, 8),
        ("configs/multinode_zero3.yaml", "zero3", 2, 16),
        ("configs/cpu_2proc.yaml", "ddp", 1, 2),
    ],
)
def test_shipped_accelerate_configs(name, strategy, machines, processes):
    launch = read_accelerate_config(name)
    assert (launch.strategy, launch.num_machines, launch.num_processes) == (strategy, machines, processes)


def test_zero_stage_one_is_refused(tmp_path):
    path = tmp_path / "zero1.yaml"
    path.write_text("distributed_type: DEEPSPEED\ndeepspeed_config: {zero_stage: 1}\n")
    with pytest.raises(PlanError, match="zero_stage 1"):
        read_accelerate_config(str(path))


@pytest.mark.parametrize(("text", "gb"), [("80GB", 80.0), ("80 GB", 80.0), ("141GiB", 141.0), ("24", 24.0)])
def test_parse_gpu_memory(text, gb):
    assert parse_gpu_memory(text) == gb


@pytest.mark.parametrize("text", ["lots", "0GB", "-8GB", "80TB"])
def test_bad_gpu_memory(text):
    with pytest.raises(PlanError, match="--gpu-memory"):
        parse_gpu_memory(text)


def test_every_shipped_recipe_header_is_read():
    for name, path in shipped_recipes().items():
        header = read_header(path)
        assert {"Hardware", "Launch", "Cost"} <= set(header.fields), name
        assert (header.hardware is None) == name.startswith("tiny/"), name


SERVER = {"use_vllm": True, "vllm_mode": "server"}
COLOCATE = {"use_vllm": True, "vllm_mode": "colocate"}
HEADER = RecipeHeader(
    {"Hardware": "2 nodes of 8 x 80 GB GPUs", "Launch": "accelerate launch --config_file configs/zero3.yaml"}
)


# (training, header, flags, nodes, training nodes, GPUs per node, strategy)
TOPOLOGIES = [
    (COLOCATE, HEADER, {}, 2, 2, 8, "zero3"),
    (SERVER, HEADER, {}, 2, 1, 8, "zero3"),
    (SERVER, HEADER, {"nodes": 3, "gpus_per_node": 4}, 3, 2, 4, "zero3"),
    (SERVER, HEADER, {"config": "configs/multinode_zero3.yaml"}, 3, 2, 8, "zero3"),  # num_machines trains
    (COLOCATE, HEADER, {"config": "configs/fsdp2.yaml"}, 1, 1, 8, "fsdp2"),
    (COLOCATE, RecipeHeader({}), {}, 1, 1, 1, "ddp"),
    (SERVER, RecipeHeader({"Launch": "--config_file configs/zero3.yaml"}), {}, 2, 1, 8, "zero3"),
]


@pytest.mark.parametrize(("training", "header", "flags", "nodes", "trains", "gpus", "strategy"), TOPOLOGIES)
def test_topology_precedence(training, header, flags, nodes, trains, gpus, strategy):
    topology = resolve_topology(training, header, **flags)
    assert (topology.nodes, topology.training_nodes, topology.gpus_per_node) == (nodes, trains, gpus)
    assert topology.strategy == strategy
    assert topology.world_size == trains * gpus


def test_server_mode_on_one_node_is_refused():
    with pytest.raises(PlanError, match="vllm_mode: server"):
        resolve_topology(SERVER, HEADER, nodes=1)
