"""What an accelerate config launches, and a `--gpu-memory` size.

An accelerate config says the strategy (`distributed_type` DEEPSPEED with `deepspeed_config.
zero_stage` 2 or 3, FSDP, MULTI_GPU) and the training processes (`num_machines`,
`num_processes`, which count training machines only: a `trl vllm-serve` node is launched
separately). A recipe's own hardware, command and cost are its `launch:` section
(gspo_trl.config.sections.LaunchConfig), read by the recipe loader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from gspo_trl.config.shipped import find_accelerate_config
from gspo_trl.plan.model_shape import PlanError

GPU_MEMORY = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>gib|gb|g)?\s*$", re.I)


@dataclass(frozen=True)
class AccelerateLaunch:
    """What an accelerate config launches: the plan's strategy and the training processes."""

    source: str
    strategy: str
    num_machines: int | None
    num_processes: int | None

    @property
    def gpus_per_node(self) -> int | None:
        if not self.num_processes:
            return None
        return max(1, self.num_processes // (self.num_machines or 1))


def parse_gpu_memory(text: str) -> float:
    """`80GB`, `80 GB`, `141GiB`, `80` -> 80.0 (a card's nominal size; the plan fills what CUDA reports)."""
    match = GPU_MEMORY.match(str(text))
    if match is None or float(match.group("value")) <= 0:
        raise PlanError(f"--gpu-memory {text!r}: expected a size such as 80GB")
    return float(match.group("value"))


def _read_mapping(path: Path) -> dict:
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise PlanError(f"accelerate config {path}: cannot read it ({error})") from None
    return content if isinstance(content, dict) else {}


def _strategy(config: dict, source: str) -> str:
    kind = str(config.get("distributed_type", "NO")).upper()
    if kind == "DEEPSPEED":
        stage = (config.get("deepspeed_config") or {}).get("zero_stage")
        if stage in (2, 3):
            return f"zero{stage}"
        raise PlanError(
            f"accelerate config {source}: deepspeed_config.zero_stage {stage!r}; the plan knows ZeRO 2 and 3"
        )
    if kind == "FSDP":
        return "fsdp2"
    if kind in ("MULTI_GPU", "NO", "MULTI_CPU"):
        return "ddp"
    raise PlanError(
        f"accelerate config {source}: distributed_type {kind!r}; use DEEPSPEED, FSDP or MULTI_GPU"
    )


def _positive(config: dict, key: str, source: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"accelerate config {source}: {key} {value!r}; expected a positive integer")
    return value


def read_accelerate_config(path: str) -> AccelerateLaunch:
    """Strategy and training processes of an accelerate config (a file or a shipped name)."""
    resolved = find_accelerate_config(path)
    if resolved is None:
        raise PlanError(f"accelerate config {path}: no such file (shipped: configs/ddp.yaml, zero2, ...)")
    config = _read_mapping(resolved)
    if "distributed_type" not in config:
        raise PlanError(f"accelerate config {path}: not an accelerate config (no distributed_type)")
    return AccelerateLaunch(
        source=path,
        strategy=_strategy(config, path),
        num_machines=_positive(config, "num_machines", path),
        num_processes=_positive(config, "num_processes", path),
    )
