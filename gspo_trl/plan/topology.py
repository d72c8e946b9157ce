"""Which GPUs train: nodes, GPUs per node and strategy, from flags, an accelerate config and `launch:`.

Precedence, strongest first: the command-line flags, an accelerate config passed with
`--accelerate-config`, the recipe's `launch:` section (nodes, gpus_per_node, gpu_memory_gb), the
accelerate config it names (`launch.accelerate_config`), and last a single GPU (what
`gspo-trl train` without accelerate starts) of 80 GB. The strategy comes from the accelerate
config (explicit, else the recipe's), else ddp. The GPU type (gspo_trl.plan.gpu_prices: the rates the
plan times work at and the price per GPU-hour) is `--gpu-type`, else `launch.gpu_type` when it
has the memory planned, else the table's first row of that memory, else H100, said as assumed;
`--gpu-type` alone also sets the memory.

With `vllm_mode: server` one node runs `trl vllm-serve` and trains nothing (TRL's server mode;
the shipped slurm script puts it on the last node), so the training world is (nodes - 1) x
GPUs per node. "nodes" in flags and `launch:` counts that node (unstated: 2, the server's and one
that trains); an accelerate config's `num_machines` does not (it launches training processes only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gspo_trl.config.batch import is_server_mode
from gspo_trl.config.batch import training_nodes as nodes_that_train
from gspo_trl.config.sections import LaunchConfig
from gspo_trl.plan.gpu_prices import DEFAULT_GPU, GpuType, find_gpu, gpu_of_memory
from gspo_trl.plan.gpu_prices import gpu_type as gpu_type_named
from gspo_trl.plan.launch import AccelerateLaunch, read_accelerate_config
from gspo_trl.plan.model_shape import PlanError

DEFAULT_GPU_MEMORY_GB = 80.0


@dataclass(frozen=True)
class Topology:
    """All nodes (a vLLM server node included) and where each number came from."""

    strategy: str
    nodes: int
    gpus_per_node: int
    gpu_memory_gb: float
    server_mode: bool
    sources: dict[str, str]
    gpu: GpuType = DEFAULT_GPU

    @property
    def total_gpus(self) -> int:
        """Every GPU the run holds (and is billed for), a vLLM server node's included."""
        return self.nodes * self.gpus_per_node

    @property
    def hardware(self) -> str:
        """`1 node(s) x 8 x H100 80 GB`: what the run is timed and priced on."""
        return f"{self.nodes} node(s) x {self.gpus_per_node} x {self.gpu.name} {self.gpu_memory_gb:g} GB"

    @property
    def training_nodes(self) -> int:
        return nodes_that_train(self.nodes, self.server_mode)

    @property
    def world_size(self) -> int:
        """Training processes: one per GPU on every training node."""
        return self.training_nodes * self.gpus_per_node

    @property
    def vllm_node(self) -> int | None:
        """1-based index of the node that serves rollouts in server mode (the last one)."""
        return self.nodes if self.server_mode else None


def _first(*candidates: tuple[Any, str]) -> tuple[Any, str]:
    return next(((value, source) for value, source in candidates if value is not None), (None, ""))


def resolve_topology(
    training: dict[str, Any],
    launch: LaunchConfig | None,
    config: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    gpu_memory_gb: float | None = None,
    gpu_type: str | None = None,
) -> Topology:
    """Combine flags, accelerate config and the recipe's `launch:` (see the module docstring);
    refuses server mode without a node left to train."""
    server = is_server_mode(training)
    explicit = read_accelerate_config(config) if config else None
    recipe_config = launch.accelerate_config if launch is not None else None
    from_recipe = read_accelerate_config(recipe_config) if recipe_config and not explicit else None
    hardware = launch if launch is not None and launch.gpus else None

    def accelerate_nodes(accelerate: AccelerateLaunch | None) -> int | None:
        if accelerate is None or accelerate.num_machines is None:
            return None
        return accelerate.num_machines + (1 if server else 0)

    def accelerate_gpus(accelerate: AccelerateLaunch | None) -> int | None:
        return accelerate.gpus_per_node if accelerate is not None else None

    explicit_source = f"--accelerate-config {config}"
    recipe_source = f"launch.accelerate_config {recipe_config}"
    node_count, node_source = _first(
        (nodes, "--nodes"),
        (accelerate_nodes(explicit), explicit_source),
        (hardware.nodes if hardware else None, "launch.nodes"),
        (accelerate_nodes(from_recipe), recipe_source),
        (2, "assumed: the vLLM server's and one that trains") if server else (1, "assumed"),
    )
    gpu_count, gpu_source = _first(
        (gpus_per_node, "--gpus-per-node"),
        (accelerate_gpus(explicit), explicit_source),
        (hardware.gpus_per_node if hardware else None, "launch.gpus_per_node"),
        (accelerate_gpus(from_recipe), recipe_source),
        (1, "assumed"),
    )
    flagged = gpu_type_named(gpu_type) if gpu_type is not None else None
    memory, memory_source = _first(
        (gpu_memory_gb, "--gpu-memory"),
        (flagged.memory_gb if flagged else None, "--gpu-type"),
        (hardware.gpu_memory_gb if hardware else None, "launch.gpu_memory_gb"),
        (DEFAULT_GPU_MEMORY_GB, "default"),
    )
    stated = find_gpu(hardware.gpu_type) if hardware and hardware.gpu_type else None
    gpu, type_source = _first(
        (flagged, "--gpu-type"),
        (stated if stated and stated.memory_gb == memory else None, "launch.gpu_type"),
        (gpu_of_memory(memory), f"assumed from {memory:g} GB; give --gpu-type"),
        (DEFAULT_GPU, f"assumed, no row of {memory:g} GB; give --gpu-type"),
    )
    accelerate = explicit or from_recipe
    strategy = accelerate.strategy if accelerate else "ddp"
    strategy_source = explicit_source if explicit else recipe_source if from_recipe else "default"
    for name, value in (("--nodes", node_count), ("--gpus-per-node", gpu_count)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlanError(f"{name} {value!r}: expected a positive integer")
    if server and node_count < 2:
        raise PlanError(
            f"vllm_mode: server with {node_count} node ({node_source}): the vLLM server node trains "
            "nothing, so no node is left to train. Give --nodes 2 or more, or use vllm_mode: colocate."
        )
    return Topology(
        strategy=strategy,
        nodes=node_count,
        gpus_per_node=gpu_count,
        gpu_memory_gb=memory,
        server_mode=server,
        gpu=gpu,
        sources={
            "nodes": node_source,
            "gpus": gpu_source,
            "memory": memory_source,
            "strategy": strategy_source,
            "gpu_type": type_source,
        },
    )
