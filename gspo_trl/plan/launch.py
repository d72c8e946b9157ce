"""Where a plan's topology comes from: an accelerate config YAML and a recipe's header comment.

An accelerate config says the strategy (`distributed_type` DEEPSPEED with `deepspeed_config.
zero_stage` 2 or 3, FSDP, MULTI_GPU) and the training processes (`num_machines`,
`num_processes`, which count training machines only: a `trl vllm-serve` node is launched
separately). A shipped recipe's header states its hardware in words ("Hardware: 2 nodes of 8 x
80 GB GPUs"), the command that launches it ("Launch: accelerate launch --config_file
configs/zero3.yaml ...") and what a step should cost ("Cost: ... ~4-5 min/step"); the parsers
here read those lines so `gspo-trl plan RECIPE` needs no flags for a shipped recipe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from gspo_trl.config.shipped import find_shipped
from gspo_trl.plan.model_shape import PlanError

HEADER_FIELD = re.compile(r"^#\s?([A-Z][A-Za-z-]*):\s*(.*)$")
HARDWARE = re.compile(
    r"(?:(?P<nodes>\d+)\s+nodes?\s+(?:of\s+)?)?(?P<gpus>\d+)\s*x\s*(?P<memory>\d+(?:\.\d+)?)\s*GB", re.I
)
CONFIG_OPTION = re.compile(r"--config(?:_file)?[ =](?P<path>\S+\.ya?ml)")
COST = re.compile(r"~?\s*(?P<low>\d+(?:\.\d+)?)(?:\s*-\s*(?P<high>\d+(?:\.\d+)?))?\s*(?P<unit>s|min|h)/step")
GPU_MEMORY = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>gib|gb|g)?\s*$", re.I)
UNIT_MINUTES = {"s": 1 / 60, "min": 1.0, "h": 60.0}


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


@dataclass(frozen=True)
class Hardware:
    """A header's "Hardware:" line: all nodes (a vLLM server node included), GPUs and GB each."""

    nodes: int
    gpus_per_node: int
    gpu_memory_gb: float


@dataclass(frozen=True)
class RecipeHeader:
    """The `# Key: text` fields of a recipe's leading comment block (continuation lines joined)."""

    fields: dict[str, str]

    @property
    def hardware(self) -> Hardware | None:
        return parse_hardware(self.fields.get("Hardware", ""))

    @property
    def launch_config(self) -> str | None:
        return launch_config(self.fields.get("Launch", ""))

    @property
    def cost(self) -> str | None:
        return self.fields.get("Cost")


def read_header(path: str | Path) -> RecipeHeader:
    """The header fields of the recipe file at `path` (empty when it has none or is unreadable)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return RecipeHeader({})
    fields: dict[str, str] = {}
    current = None
    for line in lines:
        if not line.startswith("#"):
            break
        match = HEADER_FIELD.match(line)
        if match:
            current = match.group(1)
            fields[current] = match.group(2).strip()
        elif current is not None:
            fields[current] += " " + line.lstrip("#").strip()
    return RecipeHeader(fields)


def parse_hardware(text: str) -> Hardware | None:
    """`1 node, 8 x 80 GB GPUs`, `2 nodes of 8 x 80 GB GPUs`, `1 x 80 GB GPU` -> Hardware; else None."""
    match = HARDWARE.search(text)
    if match is None:
        return None
    return Hardware(int(match.group("nodes") or 1), int(match.group("gpus")), float(match.group("memory")))


def launch_config(text: str) -> str | None:
    """The first accelerate config a Launch line passes (`--config_file X.yaml` or a launcher's
    `--config X.yaml`), skipping recipe paths: the one whose YAML has a `distributed_type`."""
    for match in CONFIG_OPTION.finditer(text):
        path = match.group("path")
        resolved = _resolve(path)
        if resolved is not None and "distributed_type" in _read_mapping(resolved):
            return path
    return None


def parse_cost_minutes(text: str | None) -> tuple[float, float] | None:
    """`~1.5-2 min/step` -> (1.5, 2.0) minutes per step; None when the text names no rate."""
    match = COST.search(text or "")
    if match is None:
        return None
    scale = UNIT_MINUTES[match.group("unit")]
    low = float(match.group("low")) * scale
    high = float(match.group("high")) * scale if match.group("high") else low
    return low, high


def parse_gpu_memory(text: str) -> float:
    """`80GB`, `80 GB`, `141GiB`, `80` -> 80.0 (a card's nominal size; the plan reads it as GiB)."""
    match = GPU_MEMORY.match(str(text))
    if match is None or float(match.group("value")) <= 0:
        raise PlanError(f"--gpu-memory {text!r}: expected a size such as 80GB")
    return float(match.group("value"))


def _resolve(path: str) -> Path | None:
    """`path` when it exists, else the shipped accelerate config it names (`configs/zero3.yaml`)."""
    candidate = Path(path).expanduser()
    if candidate.is_file():
        return candidate
    shipped = find_shipped(path)
    return shipped if shipped is not None and shipped.parent.name == "configs" else None


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
    resolved = _resolve(path)
    if resolved is None:
        raise PlanError(f"--config {path}: no such accelerate config (shipped: configs/ddp.yaml, zero2, ...)")
    config = _read_mapping(resolved)
    if "distributed_type" not in config:
        raise PlanError(f"--config {path}: not an accelerate config (no distributed_type)")
    return AccelerateLaunch(
        source=path,
        strategy=_strategy(config, path),
        num_machines=_positive(config, "num_machines", path),
        num_processes=_positive(config, "num_processes", path),
    )
