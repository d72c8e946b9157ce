"""Where a plan finds a model's `config.json`: a local directory or file, or a shipped hub id.

The shape itself (`ModelShape`, its parameter counts) lives in gspo_trl.model.sizing.shape, shared with
the trainer's FLOP count.

The shipped `model_configs/*.json` are the architecture fields of the hub checkpoints
(Qwen/Qwen3-0.6B ... Qwen/Qwen3-32B, Qwen/Qwen3-30B-A3B), so a plan needs no download.
"""

from __future__ import annotations

import json
from pathlib import Path

from gspo_trl.core.errors import PlanError
from gspo_trl.model.sizing.shape import DTYPE_BYTES, ModelShape, dtype_bytes, shape_from_config

__all__ = ["DTYPE_BYTES", "ModelShape", "PlanError", "dtype_bytes", "load_model_shape", "shipped_models"]

SHIPPED_DIR = Path(__file__).parent / "model_configs"


def shipped_models() -> dict[str, Path]:
    """Hub id (`Qwen/Qwen3-8B`) -> shipped config file."""
    return {f"Qwen/{path.stem}": path for path in sorted(SHIPPED_DIR.glob("*.json"))}


def _config_path(name_or_path: str) -> Path:
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    if path.is_file():
        return path
    by_lower = {hub_id.lower(): file for hub_id, file in shipped_models().items()}
    key = name_or_path.lower()
    for candidate in (key, f"qwen/{key}"):
        if candidate in by_lower:
            return by_lower[candidate]
    raise PlanError(
        f"model {name_or_path!r}: not a directory with config.json, not a config.json file, and not a "
        f"shipped config ({', '.join(shipped_models())}). Pass a local model directory or its config.json."
    )


def load_model_shape(name_or_path: str) -> ModelShape:
    """Read a `ModelShape` from a model directory, a config.json path, or a shipped hub id."""
    source = _config_path(name_or_path)
    return shape_from_config(json.loads(source.read_text()), name_or_path, str(source))
