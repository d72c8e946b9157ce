"""Checks of a recipe against its data: the columns its rewards read, renames, held-out size,
whether the code reward can read the rows' tests, whether the rows fill one rollout batch, and
whether the prompts fit the model's context. Run by the data loader and by
gspo_trl.training.preflight, so `validate` and `train` refuse alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gspo_trl.rewards as rewards
from gspo_trl.config.batch import rollout_batch
from gspo_trl.config.recipe import Recipe
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.core.errors import RecipeError


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
    lacking = []  # every reader's missing columns, so one `validate` names them all
    for where, spec in readers:
        missing = sorted(set(rewards.describe(spec).columns) - present)
        if missing:
            lacking.append(f"{where} needs dataset column(s) {missing}")
    if lacking:
        raise RecipeError(
            f"{'; '.join(lacking)}, but the data has {sorted(present)}. "
            "Map them with data.solution_column or data.columns."
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


def check_rows_fill_a_batch(recipe: Recipe, train_rows: int, processes: int) -> None:
    """Refuse training data with fewer rows than one rollout batch's distinct prompts.

    TRL's RepeatSampler (trl/trainer/utils.py) cuts the shuffled row indices into chunks of
    generation_batch_size / num_generations prompts and drops the incomplete last chunk, so
    smaller data gives no batch at all: the run ends at once, "done: 0 steps", exit 0.
    """
    batch = rollout_batch(recipe.training, processes)
    if train_rows < batch.prompts:
        raise RecipeError(
            f"data: {train_rows} training row(s), fewer than one rollout batch's {batch.prompts} prompts "
            f"({batch.describe('process')}); TRL would train 0 steps. Add rows, or lower "
            "per_device_train_batch_size / steps_per_generation"
        )


def prompt_text(prompt: Any) -> str:
    """The text a prompt's messages carry (a chat template only adds tokens around it)."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(message.get("content") or "") for message in prompt)


def check_prompt_lengths(rows: Any, source: str, budget: PromptBudget | None) -> None:
    """Refuse the first row whose prompt alone, plus max_completion_length, exceeds the context.

    TRL (1.16) does not truncate prompts, so such a row makes every step run a forward pass far
    past the model's positions (minutes, then garbage or an index error). Tokens are counted
    on the messages' text without the chat template: a lower bound, so nothing refused here
    would fit. A byte-level tokenizer makes no more tokens than UTF-8 bytes, so only rows with
    more bytes than the budget are tokenized: the whole split is checked in milliseconds.
    """
    if budget is None:
        return
    texts = [prompt_text(prompt) for prompt in rows["prompt"]]
    for index, text in enumerate(texts):
        if len(text.encode("utf-8")) <= budget.prompt_tokens:
            continue
        tokens = len(budget.tokenizer.encode(text, add_special_tokens=False).ids)
        if tokens > budget.prompt_tokens:
            raise RecipeError(
                f"{source} row {index}: its prompt is {tokens} tokens; with max_completion_length "
                f"{budget.completion_tokens} that exceeds {budget.context_tokens} positions "
                f"({budget.context_source}). Filter or shorten long prompts, or lower max_completion_length"
            )


@dataclass
class PromptBudget:
    """How many prompt tokens fit: the context (model positions or vLLM's limit) minus completions."""

    tokenizer: Any
    context_tokens: int
    context_source: str
    completion_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.context_tokens - self.completion_tokens


def prompt_budget(recipe: Recipe, model_dir: Path | None) -> PromptBudget | None:
    """The budget for `recipe` with the model files in `model_dir`, or None when they are not
    on disk (a hub model not downloaded yet, the tiny model not built yet): then nothing is checked.
    """
    if (
        model_dir is None
        or not (model_dir / "config.json").is_file()
        or not (model_dir / "tokenizer.json").is_file()
    ):
        return None
    from tokenizers import Tokenizer

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    config = config.get("text_config", config) if "max_position_embeddings" not in config else config
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int):
        return None
    context, where = positions, f"max_position_embeddings of {model_dir / 'config.json'}"
    vllm_limit = recipe.training.get("vllm_max_model_length")
    if recipe.training.get("use_vllm") and vllm_limit and int(vllm_limit) < context:
        context, where = int(vllm_limit), "vllm_max_model_length"
    completion = int(recipe.training.get("max_completion_length") or grpo_default("max_completion_length"))
    return PromptBudget(Tokenizer.from_file(str(model_dir / "tokenizer.json")), context, where, completion)
