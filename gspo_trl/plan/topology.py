"""Which GPUs train: nodes, GPUs per node and strategy, from flags, an accelerate config and the header.

Precedence, strongest first: the command-line flags, an accelerate config passed with
`--config`, the recipe header's "Hardware:" line, the accelerate config its "Launch:" line
names, and last a single GPU (what `gspo-trl train` without accelerate starts) of 80 GB.
The strategy comes from the accelerate config (explicit, else the header's), else ddp.

With `vllm_mode: server` one node runs `trl vllm-serve` and trains nothing (TRL's server mode;
the shipped slurm script puts it on the last node), so the training world is (nodes - 1) x
GPUs per node. "nodes" in flags and headers counts that node; an accelerate config's
`num_machines` does not (accelerate launches training processes only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gspo_trl.plan.launch import AccelerateLaunch, RecipeHeader, read_accelerate_config
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

    @property
    def training_nodes(self) -> int:
        return self.nodes - 1 if self.server_mode else self.nodes

    @property
    def world_size(self) -> int:
        """Training processes: one per GPU on every training node."""
        return self.training_nodes * self.gpus_per_node

    @property
    def vllm_node(self) -> int | None:
        """1-based index of the node that serves rollouts in server mode (the last one)."""
        return self.nodes if self.server_mode else None


def is_server_mode(training: dict[str, Any]) -> bool:
    return bool(training.get("use_vllm")) and training.get("vllm_mode", "colocate") == "server"


def _first(*candidates: tuple[Any, str]) -> tuple[Any, str]:
    return next(((value, source) for value, source in candidates if value is not None), (None, ""))


def resolve_topology(
    training: dict[str, Any],
    header: RecipeHeader,
    config: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    gpu_memory_gb: float | None = None,
) -> Topology:
    """Combine flags, accelerate config and header (see the module docstring); refuses server mode
    without a node left to train."""
    server = is_server_mode(training)
    explicit = read_accelerate_config(config) if config else None
    header_config = header.launch_config
    from_header = read_accelerate_config(header_config) if header_config and not explicit else None
    hardware = header.hardware

    def launch_nodes(launch: AccelerateLaunch | None) -> int | None:
        if launch is None or launch.num_machines is None:
            return None
        return launch.num_machines + (1 if server else 0)

    def launch_gpus(launch: AccelerateLaunch | None) -> int | None:
        return launch.gpus_per_node if launch is not None else None

    explicit_source = f"--config {config}"
    header_source = f"header Launch ({header_config})"
    node_count, node_source = _first(
        (nodes, "--nodes"),
        (launch_nodes(explicit), explicit_source),
        (hardware.nodes if hardware else None, "header Hardware"),
        (launch_nodes(from_header), header_source),
        (1, "assumed"),
    )
    gpu_count, gpu_source = _first(
        (gpus_per_node, "--gpus-per-node"),
        (launch_gpus(explicit), explicit_source),
        (hardware.gpus_per_node if hardware else None, "header Hardware"),
        (launch_gpus(from_header), header_source),
        (1, "assumed"),
    )
    memory, memory_source = _first(
        (gpu_memory_gb, "--gpu-memory"),
        (hardware.gpu_memory_gb if hardware else None, "header Hardware"),
        (DEFAULT_GPU_MEMORY_GB, "default"),
    )
    launch = explicit or from_header
    strategy = launch.strategy if launch else "ddp"
    strategy_source = explicit_source if explicit else header_source if from_header else "default"
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
        sources={
            "nodes": node_source,
            "gpus": gpu_source,
            "memory": memory_source,
            "strategy": strategy_source,
        },
    )
