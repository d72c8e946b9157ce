"""Finding a run's checkpoints: one resolver for resume, evaluation and reports.

The Trainer writes `OUTPUT_DIR/checkpoint-N/` file by file, so a run killed while saving
leaves a newer folder without some files, and a full disk leaves files cut short (half a
model, half a trainer_state.json, an empty optimizer.pt). Each caller asks for the newest
checkpoint that holds the file it needs (`trainer_state.json` to resume or plot,
`config.json` to load a model) and whose every file reads back: JSON parses, safetensors
headers parse and account for the file's size, torch pickles (zip archives) have their
central directory and every member inside the file. Nothing is loaded in full, so this costs
milliseconds even for large checkpoints. Folders that fail are skipped with a warning naming
them and the file at fault. (GSPOTrainer also writes checkpoints into a staging folder and
renames it, gspo_trl.training.safety.staged_checkpoints, so its own crashes leave no such folder.)
"""

from __future__ import annotations

import json
import logging
import re
import struct
import zipfile
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
    for checkpoint in checkpoints_newest_first(run_dir):
        problem = checkpoint_problem(checkpoint, needs)
        if problem is None:
            return checkpoint
        logger.warning(
            "%sskipping %s: incomplete (%s)", f"{purpose}: " if purpose else "", checkpoint, problem
        )
    return None


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
