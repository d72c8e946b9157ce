"""Reading a topology: a recipe's `launch:`, accelerate configs, and which source wins."""

from __future__ import annotations

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections import LaunchConfig
from gspo_trl.config.shipped import shipped_recipes
from gspo_trl.plan import PlanError
from gspo_trl.plan.launch import parse_gpu_memory, read_accelerate_config
from gspo_trl.plan.topology import resolve_topology


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


@pytest.mark.parametrize("name", list(shipped_recipes()))
def test_every_shipped_recipe_plans_from_its_launch_section(name):
    """Each shipped recipe's topology comes from its `launch:` data, none of it assumed."""
    recipe = load_recipe(name)
    topology = resolve_topology(recipe.training, recipe.launch)
    if recipe.launch.gpus:
        assert (
            topology.sources["nodes"] == "launch.nodes" and topology.sources["gpus"] == "launch.gpus_per_node"
        )
        assert topology.sources["memory"] == "launch.gpu_memory_gb"
    if recipe.launch.accelerate_config:
        assert topology.sources["strategy"] == f"launch.accelerate_config {recipe.launch.accelerate_config}"


SERVER = {"use_vllm": True, "vllm_mode": "server"}
COLOCATE = {"use_vllm": True, "vllm_mode": "colocate"}
LAUNCH = LaunchConfig(nodes=2, gpus_per_node=8, gpu_memory_gb=80, accelerate_config="configs/zero3.yaml")


# (training, launch, flags, nodes, training nodes, GPUs per node, strategy)
TOPOLOGIES = [
    (COLOCATE, LAUNCH, {}, 2, 2, 8, "zero3"),
    (SERVER, LAUNCH, {}, 2, 1, 8, "zero3"),
    (SERVER, LAUNCH, {"nodes": 3, "gpus_per_node": 4}, 3, 2, 4, "zero3"),
    (SERVER, LAUNCH, {"config": "configs/multinode_zero3.yaml"}, 3, 2, 8, "zero3"),  # num_machines trains
    (COLOCATE, LAUNCH, {"config": "configs/fsdp2.yaml"}, 1, 1, 8, "fsdp2"),
    (COLOCATE, None, {}, 1, 1, 1, "ddp"),
    (COLOCATE, LaunchConfig(gpus_per_node=0), {}, 1, 1, 1, "ddp"),  # a CPU recipe: nothing to size
    (SERVER, LaunchConfig(accelerate_config="configs/zero3.yaml"), {}, 2, 1, 8, "zero3"),
]


@pytest.mark.parametrize(("training", "launch", "flags", "nodes", "trains", "gpus", "strategy"), TOPOLOGIES)
def test_topology_precedence(training, launch, flags, nodes, trains, gpus, strategy):
    topology = resolve_topology(training, launch, **flags)
    assert (topology.nodes, topology.training_nodes, topology.gpus_per_node) == (nodes, trains, gpus)
    assert topology.strategy == strategy
    assert topology.world_size == trains * gpus


def test_server_mode_on_one_node_is_refused():
    with pytest.raises(PlanError, match="vllm_mode: server"):
        resolve_topology(SERVER, LAUNCH, nodes=1)
