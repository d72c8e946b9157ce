"""What defines a run (RUN_RECORD, written at its start) and how a resume is compared with it.

The record holds every resolved recipe key (flattened), the data's fingerprint and the number
of processes; `compare_records` refuses a resume whose defining keys differ, listing each, and
warns for keys that only change logging, saving or length (HARMLESS_KEYS). Without a record
(deleted, or an older gspo-trl) the checkpoint's training_args.bin stands in for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import yaml

from gspo_trl.config.recipe import Recipe, recipe_as_yaml
from gspo_trl.config.sections import SECTION_NAMES, SECTIONS
from gspo_trl.core.errors import RunDirError

logger = logging.getLogger(__name__)

RUN_RECORD = "run.json"
FINGERPRINT_ROWS = 1000
"""Rows hashed whole into the data fingerprint (with the row count and the column names)."""
HARMLESS_KEYS = (
    "output_dir",
    "logging_steps",
    "logging_first_step",
    "logging_strategy",
    "report_to",
    "run_name",
    "project",
    "trackio_space_id",
    "save_steps",
    "save_strategy",
    "save_total_limit",
    "save_only_model",
    "max_steps",
    "num_train_epochs",
    "eval_steps",
    "eval_strategy",
    "per_device_eval_batch_size",
    "dataloader_num_workers",
    "log_completions",
    "num_completions_to_print",
    "gradient_checkpointing",
    "vllm_server_host",
    "vllm_server_port",
    "vllm_server_timeout",
    "vllm_gpu_memory_utilization",
    *(f"{section.name}." for section in SECTIONS if not section.defines_run),
)
"""Keys (a trailing dot: a whole section) a resumed run may change: they decide what is logged,
saved, evaluated or how long it trains, not what is trained on or how. Every other key defines
the run."""


def run_record(recipe: Recipe, data: Any) -> dict[str, Any]:
    """The run's identity: every resolved recipe key (flattened), the data fingerprint, processes."""
    text = recipe_as_yaml(recipe)
    content = yaml.safe_load(text)
    keys = _flatten({key: value for key, value in content.items()})
    keys["data (fingerprint of the training rows)"] = (
        data_fingerprint(data.train) if data is not None else None
    )
    keys["processes"] = int(os.environ.get("WORLD_SIZE", "1"))
    return {"recipe_sha256": hashlib.sha256(text.encode()).hexdigest(), "keys": keys}


def data_fingerprint(rows: Any) -> str:
    """sha256 of the row count, the column names and the first FINGERPRINT_ROWS rows."""
    digest = hashlib.sha256(json.dumps([len(rows), sorted(rows.column_names)]).encode())
    for row in rows.select(range(min(FINGERPRINT_ROWS, len(rows)))):
        digest.update(json.dumps(row, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def _flatten(content: dict[str, Any]) -> dict[str, Any]:
    """Each section's keys one by one (`engine.max_staleness`), so a resume names the one that
    changed; also a record written before every section was (sampling and launch as one dict)."""
    flat: dict[str, Any] = {}
    for key, value in content.items():
        if isinstance(value, dict) and value and key in SECTION_NAMES:
            flat.update({f"{key}.{sub_key}": sub_value for sub_key, sub_value in value.items()})
        else:
            flat[key] = value
    return flat


def _harmless(key: str) -> bool:
    return any(key == entry or (entry.endswith(".") and key.startswith(entry)) for entry in HARMLESS_KEYS)


def compare_records(folder: Path, record: dict[str, Any], checkpoint: Path | None = None) -> None:
    """Refuse a resume whose defining keys differ from the run's record; warn for harmless ones.
    Without a record (deleted, or an older gspo-trl), the checkpoint's training_args.bin is
    what the run trained with (`checkpoint_settings`)."""
    path = folder / RUN_RECORD
    try:
        old = json.loads(path.read_text(encoding="utf-8"))["keys"]
        if not isinstance(old, dict):
            raise TypeError(f"'keys' is a {type(old).__name__}, not a mapping")
    except FileNotFoundError:
        old = checkpoint_settings(checkpoint, record["keys"]) if checkpoint is not None else None
        if old is None:
            logger.warning("--resume: %s has no %s; not checked for a different run", folder, path.name)
            return
        logger.warning(
            "--resume: %s has no %s; checking against %s instead (its training settings only)",
            folder,
            path.name,
            checkpoint / TRAINING_ARGS,
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RunDirError(
            f"--resume: {path} is unreadable ({error}); resume with --overwrite or a new output_dir"
        ) from None
    old, new = _flatten(old), record["keys"]
    changed = [key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    shown = [f"{key} ({_short(old.get(key))} -> {_short(new.get(key))})" for key in changed]
    defining = [text for key, text in zip(changed, shown, strict=True) if not _harmless(key)]
    harmless = [text for key, text in zip(changed, shown, strict=True) if _harmless(key)]
    if defining:
        raise RunDirError(
            f"--resume: {folder} is a different run: {'; '.join(defining)}. Resume it with the settings it "
            f"started with ({folder / 'recipe.yaml'}), or train into another output_dir"
        )
    if harmless:
        logger.warning("--resume: changed since %s started (fine to change): %s", folder, "; ".join(harmless))


TRAINING_ARGS = "training_args.bin"
"""What the Trainer pickles into every checkpoint: the TrainingArguments (GSPOConfig) it ran with."""
MACHINE_KEYS = ("output_dir", "use_cpu", "bf16")
"""Training keys gspo_trl.training.build.gspo_config rewrites for the machine (bf16 off on a CPU)."""


def checkpoint_settings(checkpoint: Path, keys: dict[str, Any]) -> dict[str, Any] | None:
    """The values the checkpoint's run trained with, for every key of `keys` its GSPOConfig has
    as a plain value, from training_args.bin (None when it cannot be read). Keys it has no value
    for are copied from `keys`, so only what it recorded can differ.

    training_args.bin is a pickle (the Trainer writes it with torch.save); it is read only here,
    from the run's own output_dir, which the user's earlier run wrote."""
    try:
        import torch

        args = torch.load(checkpoint / TRAINING_ARGS, weights_only=False)
    except Exception as error:  # a missing or foreign file: say so, check nothing
        logger.warning("--resume: cannot read %s (%s)", checkpoint / TRAINING_ARGS, error)
        return None
    old = dict(keys)
    for key in keys:
        value = getattr(args, key, None)
        value = getattr(value, "value", value)  # enums (lr_scheduler_type, save_strategy, ...)
        if key in MACHINE_KEYS or not isinstance(value, int | float | str | bool):
            continue
        if not isinstance(keys[key], int | float | str | bool):
            continue
        old[key] = value
    return old


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
