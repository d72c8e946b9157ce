"""Checks of a recipe against its data: the columns its rewards read, renames, held-out size,
and whether the code reward can read the rows' tests. Run by the data loader and by
gspo_trl.training.preflight, so `validate` and `train` refuse alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gspo_trl import rewards
from gspo_trl.config.recipe import Recipe
from gspo_trl.errors import RecipeError


def required_columns(recipe: Recipe) -> set[str]:
    """Dataset columns the recipe's rewards (and held-out grader) read."""
    specs = [entry.spec for entry in recipe.rewards]
    if recipe.heldout is not None and recipe.heldout.reward:
        specs.append(recipe.heldout.reward)
    return {column for spec in specs for column in rewards.describe(spec).columns}


def check_columns(recipe: Recipe, columns: Iterable[str]) -> None:
    """Refuse a dataset that lacks a column some reward needs, naming reward and column."""
    present = set(columns)
    readers = [(f"rewards[{i}] ({entry.spec})", entry.spec) for i, entry in enumerate(recipe.rewards)]
    if recipe.heldout is not None and recipe.heldout.reward:
        readers.append((f"heldout.reward ({recipe.heldout.reward})", recipe.heldout.reward))
    for where, spec in readers:
        missing = sorted(set(rewards.describe(spec).columns) - present)
        if missing:
            raise RecipeError(
                f"{where} needs dataset column(s) {missing}, but the data has "
                f"{sorted(present)}. Map them with data.solution_column or data.columns."
            )


def check_eval_size(eval_size: float, rows: int) -> None:
    """Refuse a `data.eval_size` that leaves no training row or no held-out row.

    A count is >= 1; a fraction (0 < f < 1) holds out ceil(f x rows) rows, the rule `datasets`'
    train_test_split applies (and fails on, with a traceback, when either side is empty).
    """
    if eval_size < 0 or not math.isfinite(eval_size):
        raise RecipeError(f"data.eval_size: {eval_size} must be a count >= 1 or a fraction in (0, 1)")
    held_out = int(eval_size) if eval_size >= 1 else math.ceil(eval_size * rows)
    if held_out >= rows:
        raise RecipeError(
            f"data.eval_size: {eval_size} holds out {held_out} of the {rows} rows, leaving none to train on"
        )


def check_column_renames(
    renames: Mapping[str, str], columns: Iterable[str], other_targets: Iterable[str] = ()
) -> None:
    """Refuse `data.columns` renames that would replace the prompt or leave two of the same name.

    A rename onto an existing `prompt` would silently replace what the model is asked, and
    renaming `prompt` away without giving another column that name leaves nothing to prompt
    with. A rename onto any other existing column moves that column aside instead
    (gspo_trl.data.loading), as OpenR1-Math's and MATH-500's `answer -> solution` need.
    """
    present = set(columns)
    targets = list(renames.values())
    for source, target in renames.items():
        if source == target:
            continue
        if target == "prompt" and target in present and target not in renames:
            raise RecipeError(
                f"data.columns: renaming {source!r} to {target!r} would replace the existing column "
                f"{target!r}; rename that one too (e.g. {{{target}: original_{target}}}) or pick another name"
            )
        if targets.count(target) > 1:
            raise RecipeError(f"data.columns: several columns are renamed to {target!r}")
    if "prompt" in renames and renames["prompt"] != "prompt" and "prompt" not in [*targets, *other_targets]:
        raise RecipeError(
            f"data.columns: renames 'prompt' to {renames['prompt']!r}, leaving no prompt column; "
            "give another column the name prompt (data.prompt_column) or drop the rename"
        )


CODE_ROWS_CHECKED = 16
"""Rows whose `tests` the preflight reads the way the code reward will (cheap: no code runs)."""


def check_code_tests(recipe: Recipe, rows: Any, source: str) -> None:
    """Refuse data whose first rows' `tests` the `code` reward cannot read.

    The reward scores such a row None with a warning and training goes on without a signal;
    one unreadable row among the first is a format problem, refused naming the row (its
    index in the source) and what its `tests` held.
    """
    from gspo_trl.rewards.code_tests import asserted_function, read_tests

    readers = [f"rewards[{i}] ({e.spec})" for i, e in enumerate(recipe.rewards) if _is_code(e.spec)]
    if recipe.heldout is not None and recipe.heldout.reward and _is_code(recipe.heldout.reward):
        readers.append(f"heldout.reward ({recipe.heldout.reward})")
    if not readers or "tests" not in rows.column_names:
        return
    sample = rows.select(range(min(CODE_ROWS_CHECKED, len(rows))))
    names = sample["entry_point"] if "entry_point" in sample.column_names else [None] * len(sample)
    for index, (tests, name) in enumerate(zip(sample["tests"], names, strict=True)):
        name = name or asserted_function(tests)
        try:
            cases = read_tests(tests, name)
        except ValueError as error:
            problem = str(error)
        else:
            if not (isinstance(cases, str) and not name):
                continue
            problem = "check-style test code needs an `entry_point` column naming the function"
        raise RecipeError(
            f"{readers[0]}: {source} row {index}: its tests cannot be read by the code reward: {problem} "
            f"(got {str(tests)[:80]!r}). Formats: docs/rewards.md"
        )


def _is_code(spec: str) -> bool:
    return rewards.describe(spec).name == "code"
