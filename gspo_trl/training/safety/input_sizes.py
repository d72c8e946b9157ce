"""Settings a few characters long that would ask for more memory than the machine has, refused
by `validate` with the arithmetic, instead of an out-of-memory kill minutes into `train`.

Each bound comes from something that exists: a synthetic source's distinct problems
(`ReversalTask.distinct_problems`); without vLLM, the float32 logits TRL's single `model.generate`
call holds at once (completions x vocabulary x 4 bytes) against physical memory; and, before the
built-in tiny model's vocabulary is known, MAX_COMPLETIONS_PER_GENERATE completions per process, a
stated sanity cap. The TRL and transformers lines and the run that set the cap:
docs/plan.md ("Memory per GPU").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gspo_trl.config.recipe import Recipe
from gspo_trl.core.errors import RecipeError
from gspo_trl.data.synthetic import ReversalTask

SYNTHETIC_PROBLEMS = {"synthetic:reversal": ReversalTask().distinct_problems}
"""Distinct problems each synthetic `data.path` can generate."""
FLOAT32_BYTES = 4
MAX_COMPLETIONS_PER_GENERATE = 65_536
"""Completions one process may sample in one `model.generate` call (see the module docstring)."""


def physical_memory_bytes() -> int:
    """This machine's RAM (sysconf), the most any allocation here can get."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_synthetic_rows(recipe: Recipe) -> None:
    """A synthetic source asked for more rows than its task has distinct problems."""
    limit = SYNTHETIC_PROBLEMS.get(recipe.data.path)
    if limit is not None and recipe.data.num_rows > limit:
        raise RecipeError(
            f"data.num_rows: {recipe.data.num_rows:,} rows from {recipe.data.path}, which has only {limit:,} "
            "distinct problems (digit strings of its lengths that are not palindromes): more rows only "
            f"repeat them, and each is generated in memory first; give at most {limit:,}"
        )


def vocabulary_size(model_folder: Path | None) -> int | None:
    """vocab_size from the model's config.json (a multimodal model's text_config), when on disk."""
    if model_folder is None:
        return None
    try:
        config = json.loads((model_folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no config yet (the tiny model before its first run), or one loading will refuse
    if not isinstance(config, dict):
        return None
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return size if isinstance(size, int) and size > 0 else None


def check_generation_fits(recipe: Recipe, completions_per_process: int, model_folder: Path | None) -> None:
    """Without vLLM: the float32 logits of one decoding step over a process's whole generation
    batch must fit in this machine's memory (see the module docstring for the TRL lines)."""
    if recipe.training.get("use_vllm"):
        return  # vLLM schedules its own batches (max_num_seqs)
    vocabulary = vocabulary_size(model_folder)
    if vocabulary is not None:
        _check_logits_fit(completions_per_process, vocabulary)
    if completions_per_process > MAX_COMPLETIONS_PER_GENERATE:
        raise RecipeError(
            f"num_generations x per_device_train_batch_size: a rollout batch generates "
            f"{completions_per_process:,} completions per process in one model.generate call "
            f"(per_device_train_batch_size x steps_per_generation), more than the "
            f"{MAX_COMPLETIONS_PER_GENERATE:,} a call may sample (recipes here sample at most 128); lower "
            "per_device_train_batch_size or num_generations (or generate with use_vllm: true)"
        )


def _check_logits_fit(completions_per_process: int, vocabulary: int) -> None:
    needed = completions_per_process * vocabulary * FLOAT32_BYTES
    memory = physical_memory_bytes()
    if needed > memory:
        raise RecipeError(
            f"num_generations: a rollout batch generates {completions_per_process:,} completions per process "
            f"in one model.generate call (per_device_train_batch_size x steps_per_generation), and each "
            f"decoding step holds their float32 logits: {completions_per_process:,} x {vocabulary:,} "
            f"(vocabulary) x 4 bytes = {needed / 2**30:,.0f} GiB, more than this machine's "
            f"{memory / 2**30:,.0f} GiB of memory; lower per_device_train_batch_size, steps_per_generation "
            "or num_generations (or generate with use_vllm: true)"
        )
