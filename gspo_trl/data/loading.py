"""The recipe's `data:` section: load prompts, map columns, add the system prompt, split.

Sources: a local json/jsonl/parquet/csv file or directory, a hub dataset id, or a built-in
synthetic task (`synthetic:reversal`). Rows are never dropped silently: a malformed row
stops the run with its index and what is wrong with it. Prompts come out conversational
(a list of chat messages), so the tokenizer's chat template - or the recipe's override -
decides how the model sees them, as in TRL.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from datasets import Dataset

from gspo_trl.config.data_checks import check_column_renames, check_eval_size
from gspo_trl.config.sections import DataConfig
from gspo_trl.core.errors import DataError
from gspo_trl.data import presets
from gspo_trl.data.sources import load_split

logger = logging.getLogger(__name__)

MAX_ROWS_REPORTED = 5


def _rename_columns(dataset: Dataset, config: DataConfig) -> Dataset:
    renames = dict(config.columns)
    if config.prompt_column != "prompt":
        renames[config.prompt_column] = "prompt"
    if config.solution_column and config.solution_column != "solution":
        renames[config.solution_column] = "solution"
    missing = [source for source in renames if source not in dataset.column_names]
    if "prompt" not in renames.values() and "prompt" not in dataset.column_names:
        missing.append(config.prompt_column)
    if missing:
        raise DataError(
            f"data: column(s) {missing} not in {config.path!r}; its columns are {dataset.column_names}. "
            "Set data.prompt_column / data.solution_column / data.columns to match."
        )
    check_column_renames(config.columns, dataset.column_names, other_targets=renames.values())
    return dataset.rename_columns(_move_aside_clashes(renames, dataset.column_names)) if renames else dataset


def _move_aside_clashes(renames: dict[str, str], columns: Sequence[str]) -> dict[str, str]:
    """`renames` plus `<target>_original` for every existing column a rename would land on.

    OpenR1-Math-220k and MATH-500 have a worked `solution` beside the gold `answer`; mapping
    answer -> solution would otherwise fail inside datasets with 'Field "solution" exists 2
    times'. The old column is kept under a new name (logged), never dropped.
    """
    moved = dict(renames)
    for source, target in renames.items():
        if target == source or target not in columns or target in renames:
            continue
        aside = f"{target}_original"
        if aside in columns or aside in moved.values():
            raise DataError(
                f"data: renaming {source!r} -> {target!r} would clash with the existing {target!r}, "
                f"and {aside!r} is taken too. Rename {target!r} yourself with data.columns."
            )
        logger.warning(
            "data: column %r is renamed to %r, which the data already has; the old %r is kept as %r",
            source,
            target,
            target,
            aside,
        )
        moved[target] = aside
    return moved


CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
"""Roles chat templates render (Qwen3's and Llama 3's: system, user, assistant, tool; gpt-oss's
developer). Templates skip or mangle any other role without an error, so a typo'd role would
train on a prompt the model never sees as written."""


def _prompt_problem(prompt: Any) -> str | None:
    """Why `prompt` cannot be used, or None when it is a usable prompt."""
    if isinstance(prompt, str):
        return None if prompt.strip() else "prompt is empty"
    if isinstance(prompt, list) and prompt:
        for position, message in enumerate(prompt):
            if not isinstance(message, dict) or not {"role", "content"} <= message.keys():
                return "prompt messages must be dicts with 'role' and 'content'"
            if message["role"] not in CHAT_ROLES:
                return f"message {position} has role {message['role']!r}, not one of {list(CHAT_ROLES)}"
        if not any(message["role"] == "user" for message in prompt):
            roles = [message["role"] for message in prompt]
            return f"prompt has no user message (roles {roles}): nothing asks the model for a completion"
        return None
    return f"prompt must be a non-empty string or list of chat messages, got {type(prompt).__name__}"


def check_rows(dataset: Dataset, source: str, required: Sequence[str] = ()) -> None:
    """Raise DataError naming the first bad rows: unusable prompts, or nulls in `required` columns."""
    problems = []
    for index, prompt in enumerate(dataset["prompt"]):
        problem = _prompt_problem(prompt)
        if problem:
            problems.append(f"row {index}: {problem}")
    for column in required:
        if column not in dataset.column_names:
            continue  # reported by name once the columns are checked against the rewards
        for index, value in enumerate(dataset[column]):
            if value is None:
                problems.append(f"row {index}: column {column!r} is null")
    if problems:
        shown = "; ".join(problems[:MAX_ROWS_REPORTED])
        more = f" (and {len(problems) - MAX_ROWS_REPORTED} more)" if len(problems) > MAX_ROWS_REPORTED else ""
        raise DataError(f"{source}: {shown}{more}. Fix or remove these rows; none were dropped.")


def _to_conversation(example: dict[str, Any], system_prompt: str | None) -> dict[str, Any]:
    prompt = example["prompt"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return {"prompt": messages}


def checked_rows(dataset: Dataset, config: DataConfig, source: str, required: Sequence[str] = ()) -> Dataset:
    """One split's rows renamed and checked (prompts, nulls in `required`), in source order and
    not yet conversational: what a caller's own row checks (the preflight's) read."""
    if len(dataset) == 0:
        raise DataError(f"{source}: the dataset is empty")
    dataset = presets.transform_rows(dataset, config, source)
    dataset = _rename_columns(dataset, config)
    check_rows(dataset, source, required)
    return dataset


def conversational(dataset: Dataset, config: DataConfig) -> Dataset:
    """Checked rows with chat-message prompts (and the recipe's system prompt)."""
    return dataset.map(_to_conversation, fn_kwargs={"system_prompt": config.system_prompt})


def prepare(dataset: Dataset, config: DataConfig, source: str, required: Sequence[str] = ()) -> Dataset:
    """Renamed, checked, conversational copy of one split."""
    return conversational(checked_rows(dataset, config, source, required), config)


@dataclass
class SourceSplit:
    """One split of the recipe's data as it was read: renamed and checked, rows in source order."""

    rows: Dataset
    source: str
    """How errors name it: `data 'path' split 'train'`, or `data 'path' (eval)`."""


def load_splits(config: DataConfig, required_columns: Sequence[str] = ()) -> list[SourceSplit]:
    """The recipe's training split, then its eval split when `data.eval_split` names one, checked
    (`required_columns` are those the rewards read) but not yet split or shuffled: a caller's
    further row checks name a bad row by its index in the source (file line order)."""
    config = presets.apply_preset(config)
    source = f"data {config.path!r}"
    train = load_split(config, config.split)
    if config.max_rows is not None:
        train = train.select(range(min(config.max_rows, len(train))))
    name = f"{source} split {config.split!r}"
    splits = [SourceSplit(checked_rows(train, config, name, required_columns), name)]
    if config.eval_split:
        name = f"{source} (eval)"
        rows = load_split(config, config.eval_split)
        splits.append(SourceSplit(checked_rows(rows, config, name, required_columns), name))
    return splits


def training_splits(splits: Sequence[SourceSplit], config: DataConfig) -> tuple[Dataset, Dataset | None]:
    """(train, eval or None) from `load_splits`: conversational, and `eval_size` rows split off
    the training split when the recipe names no eval split."""
    config = presets.apply_preset(config)
    train = conversational(splits[0].rows, config)
    evaluation = conversational(splits[1].rows, config) if len(splits) > 1 else None
    if evaluation is None and config.eval_size:
        check_eval_size(config.eval_size, len(train))
        size = int(config.eval_size) if config.eval_size >= 1 else config.eval_size
        split = train.train_test_split(test_size=size, seed=config.seed)
        train, evaluation = split["train"], split["test"]
    return train, evaluation  # the row counts: the training banner's data line says them once


def load_data(config: DataConfig, required_columns: Sequence[str] = ()) -> tuple[Dataset, Dataset | None]:
    """(train, eval or None) for the recipe; `required_columns` are those the rewards read.

    Rows are checked before `eval_size` splits them off, so a bad row is named by its index
    in the source (file line order), not by its place in a shuffled split.
    """
    return training_splits(load_splits(config, required_columns), config)
