"""Finding a run's checkpoints: one resolver for resume, evaluation and reports.

The Trainer writes `OUTPUT_DIR/checkpoint-N/` file by file, so a run killed while saving
leaves a newer folder without some files, and a full disk leaves files cut short (half a
model, half a trainer_state.json, an empty optimizer.pt). Each caller asks for the newest
checkpoint that holds the files it needs (every part a resume reads: `resumable_checkpoint`;
`trainer_state.json` to plot, `config.json` to load a model) and whose every file reads
back: JSON parses, safetensors headers parse and account for the file's size, torch
pickles (zip archives) have their central directory and every member inside the file.
Nothing is loaded in full, so this costs milliseconds even for large checkpoints. Folders
that fail are skipped with a warning naming them and the file at fault. (GSPOTrainer also
writes checkpoints into a staging folder and renames it, gspo_trl.training.probes.staged_checkpoints,
so its own crashes leave no such folder.)
"""

from __future__ import annotations

import json
import logging
import re
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
"""transformers' own naming (trainer_utils.PREFIX_CHECKPOINT_DIR + '-' + step)."""
TRAINER_STATE = "trainer_state.json"
MODEL_CONFIG = "config.json"
TORCH_ARCHIVES = (".pt", ".pth", ".bin")
"""torch.save's format: a zip archive, whose central directory is written last."""
SMALL_ARCHIVE_BYTES = 16 << 20
"""Archives up to this size are also CRC-checked member by member (rng states, schedulers)."""


def checkpoints_newest_first(run_dir: str | Path) -> list[Path]:
    """`checkpoint-N` folders of a run, highest N first (empty when `run_dir` is no folder)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return []
    numbered = [(p, CHECKPOINT_NAME.match(p.name)) for p in folder.iterdir() if p.is_dir()]
    return [p for p, match in sorted(((p, m) for p, m in numbered if m), key=lambda pm: -int(pm[1].group(1)))]


def latest_checkpoint(run_dir: str | Path, needs: str = TRAINER_STATE, purpose: str = "") -> Path | None:
    """The newest complete checkpoint holding the file `needs`, or None; skipped ones are logged."""
    return _newest(run_dir, lambda checkpoint: checkpoint_problem(checkpoint, needs), purpose)


def resumable_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint holding every part a resume reads, each file whole, or None.

    transformers' Trainer restores weights, optimizer, scheduler and RNG from the folder it is
    given, but skips the optimizer and scheduler without a word when either file is missing
    (Trainer._load_optimizer_and_scheduler) and only warns for the RNG state: such a resume
    silently restarts Adam and the learning-rate schedule. Missing weights end in a traceback
    (_load_from_checkpoint). Such folders are skipped, naming what they lack, for the newest
    earlier one that is complete.
    """
    return _newest(run_dir, resume_problem, "--resume")


def _newest(run_dir: str | Path, problem_of: Callable[[Path], str | None], purpose: str) -> Path | None:
    skipped = []
    for checkpoint in checkpoints_newest_first(run_dir):
        problem = problem_of(checkpoint)
        if problem is None:
            if skipped:
                logger.warning(
                    "%sfalling back to %s, the newest complete checkpoint", _prefix(purpose), checkpoint
                )
            return checkpoint
        skipped.append(checkpoint)
        logger.warning("%sskipping %s: incomplete (%s)", _prefix(purpose), checkpoint, problem)
    return None


def _prefix(purpose: str) -> str:
    return f"{purpose}: " if purpose else ""


WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
)
"""transformers' SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME and
peft's adapter files (named here so this module stays free of transformers; a test compares)."""
OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")
SCHEDULER_FILE = "scheduler.pt"
FSDP_MODEL_PREFIX, FSDP_OPTIMIZER_PREFIX = "pytorch_model_fsdp", "optimizer"
DEEPSPEED_LATEST = "latest"
"""DeepSpeed writes weights and optimizer shards into checkpoint-N/<tag>/ and the tag into `latest`."""


def _deepspeed_tag(checkpoint: Path) -> Path | None:
    latest = checkpoint / DEEPSPEED_LATEST
    if not latest.is_file():
        return None
    tag = checkpoint / latest.read_text(encoding="utf-8", errors="replace").strip()
    return tag if tag.is_dir() else None


def _has_weights(checkpoint: Path) -> bool:
    tag = _deepspeed_tag(checkpoint)
    return (
        any((checkpoint / name).is_file() for name in WEIGHT_FILES)
        or any(path.name.startswith(FSDP_MODEL_PREFIX) for path in checkpoint.iterdir())
        or (tag is not None and any(tag.glob("*model_states.pt")))
    )


def _has_optimizer(checkpoint: Path) -> bool:
    tag = _deepspeed_tag(checkpoint)
    return (
        any((checkpoint / name).is_file() for name in OPTIMIZER_FILES)
        or any(p.is_dir() and p.name.startswith(FSDP_OPTIMIZER_PREFIX) for p in checkpoint.iterdir())
        or (tag is not None and any(tag.glob("*optim_states.pt")))
    )


RESUME_PARTS: tuple[tuple[str, Callable[[Path], bool]], ...] = (
    ("model weights (model.safetensors, an adapter or a DeepSpeed/FSDP shard folder)", _has_weights),
    ("optimizer state (optimizer.pt)", _has_optimizer),
    (  # DeepSpeed's own scheduler is saved inside its tag folder
        f"scheduler state ({SCHEDULER_FILE})",
        lambda c: (c / SCHEDULER_FILE).is_file() or _deepspeed_tag(c) is not None,
    ),
    ("RNG state (rng_state*.pth)", lambda c: any(c.glob("rng_state*.pth"))),
    (TRAINER_STATE, lambda c: (c / TRAINER_STATE).is_file()),
)
"""Every part a resume reads, and how to tell it is there."""


def resume_problem(checkpoint: Path) -> str | None:
    """What `checkpoint` lacks to be resumed from (each missing part named), or None."""
    missing = [name for name, present in RESUME_PARTS if not present(checkpoint)]
    if missing:
        return "no " + ", no ".join(missing)
    return checkpoint_problem(checkpoint)


def checkpoint_problem(checkpoint: Path, needs: str = TRAINER_STATE) -> str | None:
    """Why `checkpoint` cannot be used (the file and what is wrong with it), or None."""
    if not (checkpoint / needs).is_file():
        return f"no {needs}"
    for path in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
        problem = file_problem(path)
        if problem:
            return f"{path.relative_to(checkpoint)}: {problem}"
    return None


def file_problem(path: Path) -> str | None:
    """What is wrong with one checkpoint file, judged by its format; None when it reads back."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            json.loads(path.read_bytes())
        elif suffix == ".safetensors":
            return _safetensors_problem(path)
        elif suffix in TORCH_ARCHIVES:
            return _archive_problem(path)
    except (OSError, ValueError) as error:
        return f"unreadable ({error})"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """An 8-byte little-endian header length, a JSON header, then exactly the tensors' bytes."""
    size = path.stat().st_size
    with path.open("rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            return f"{size} bytes, shorter than a safetensors header"
        (header_length,) = struct.unpack("<Q", prefix)
        if 8 + header_length > size:
            return f"header of {header_length} bytes does not fit in {size} bytes"
        header = json.loads(file.read(header_length))
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_length + max(ends, default=0)
    return None if expected == size else f"{size} bytes, but its header describes {expected}"


def _archive_problem(path: Path) -> str | None:
    size = path.stat().st_size
    if size == 0:
        return "empty"
    if not zipfile.is_zipfile(path):
        return None if _legacy_pickle(path) else f"{size} bytes, not a complete torch archive"
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            if member.header_offset + member.compress_size > size:
                return f"member {member.filename} runs past the end of the file"
        if size <= SMALL_ARCHIVE_BYTES and archive.testzip() is not None:
            return "a member fails its checksum"
    return None


def _legacy_pickle(path: Path) -> bool:
    """torch.save(_use_new_zipfile_serialization=False) files: a pickle protocol 2 header."""
    with path.open("rb") as file:
        return file.read(2) == b"\x80\x02"
