"""Every check a run makes before it loads a model, in one function that `validate` shares.

`gspo-trl validate` and `gspo-trl train` call `preflight`, so a recipe that validates fails
in training only for reasons that need the model or the hardware. It refuses, naming the
culprit: the recipe's keys and GSPO settings (gspo_trl.config.validation), a local model path
that is not there, reward columns the data lacks, null values in the columns the rewards read
(a null gold answer would be graded as text), chat prompts with unknown roles or no user turn,
fewer rows than one rollout batch, prompts longer than the model's context (when its files are
on disk), a held-out section without a held-out split, and an output directory that cannot be
written. It imports neither torch nor TRL, so `train` refuses as fast as `validate` (vLLM, when
a recipe that uses it is otherwise fine, is imported to see that it can be).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gspo_trl.config.batch import rollout_batch
from gspo_trl.config.data_checks import (
    check_code_tests,
    check_columns,
    check_prompt_lengths,
    check_rows_fill_a_batch,
    prompt_budget,
    required_columns,
)
from gspo_trl.config.defaults import LORA_LEARNING_RATE_FACTOR
from gspo_trl.config.hub_ids import looks_like_local_path
from gspo_trl.config.optional_packages import check_vllm_imports
from gspo_trl.config.recipe import Recipe
from gspo_trl.config.rewards_section_checks import REWARDS_KEY
from gspo_trl.config.sections import TINY, TINY_MODEL_DIR
from gspo_trl.config.sections.tiny import TINY_MAX_POSITIONS
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.config.validation import ROLLOUT_KEYS, check_reward_construction, find_problems, world_size
from gspo_trl.core.errors import RecipeError
from gspo_trl.model.loading.hub import check_cached_when_offline, check_hub_push
from gspo_trl.training.safety.input_sizes import check_generation_fits, check_synthetic_rows

logger = logging.getLogger("gspo_trl")


@dataclass
class PreparedData:
    """The recipe's data, checked: training rows and held-out rows (None without a split)."""

    train: Any
    eval: Any | None


def output_dir_of(recipe: Recipe) -> str:
    """The run's output directory: the recipe's `output_dir`, else runs/<recipe file stem>."""
    explicit = recipe.training.get("output_dir")
    return str(explicit or Path("runs") / Path(recipe.source).stem.replace("<defaults>", "default"))


def lora_rate_warnings(recipe: Recipe) -> list[str]:
    """LoRA at full fine-tuning's learning rate (TRL's default or below) learns ~10x slower than
    intended: the adapters start at zero and move only as far as the rate lets them."""
    rate = recipe.training.get("learning_rate", grpo_default("learning_rate"))
    if not recipe.model.lora or not isinstance(rate, int | float) or rate > grpo_default("learning_rate"):
        return []
    return [
        f"model.lora with learning_rate {rate:g}, a full fine-tuning rate: LoRA usually wants "
        f"~{LORA_LEARNING_RATE_FACTOR}x it (recipes/qwen3-4b: 1e-6 full, 1e-5 LoRA); try "
        f"--learning_rate {rate * LORA_LEARNING_RATE_FACTOR:g}"
    ]


def check_output_dir(output_dir: str) -> None:
    """Refuse an output_dir that is a file or sits in a place this process cannot write."""
    path = Path(output_dir)
    if path.exists() and not path.is_dir():
        raise RecipeError(f"output_dir: {output_dir!r} is a file; give a directory")
    existing = path
    while not existing.exists():
        if existing.is_symlink():  # lexists but not exists: it points nowhere, or at itself
            raise RecipeError(
                f"output_dir: {str(existing)!r} (for {output_dir!r}) is a symbolic link to "
                f"{os.readlink(existing)!r}, which {_link_fault(existing)}; fix or remove the link"
            )
        existing = existing.parent
    if not existing.is_dir():
        raise RecipeError(f"output_dir: {str(existing)!r} is a file (for {output_dir!r}); give a directory")
    try:  # a real write: os.access reads mode bits (root passes them all), not ACLs, quotas, NFS squash
        descriptor, probe = tempfile.mkstemp(prefix=".gspo-write-probe-", dir=existing)
        os.close(descriptor)
        os.remove(probe)
    except OSError as error:
        raise RecipeError(
            f"output_dir: cannot write to {str(existing)!r} (for {output_dir!r}): {error.strerror}"
        ) from None


def _link_fault(link: Path) -> str:
    try:
        link.resolve(strict=True)
    except RuntimeError:  # Python 3.11: "Symlink loop from ..."
        return "loops back on itself"
    except OSError as error:
        return "loops back on itself" if error.errno == errno.ELOOP else "does not exist"
    return "cannot be reached"


RUN_OWNED = ("checkpoint-", ".staging")
"""Names under an output_dir that a run deletes or replaces (checkpoint rotation, --overwrite,
staged saves): a model loaded from there would be removed under the run."""


def check_output_dir_spares_model(recipe: Recipe) -> None:
    """Refuse an output_dir where the run's saves would write over the model it starts from.

    The run saves its model into output_dir itself (`trainer.save_model(output_dir)`): equal to
    the model's folder, the base model's weights and config are replaced by the trained ones.
    A model folder inside output_dir is safe (the tiny model lives there) unless it is one of
    the folders a run deletes or replaces (RUN_OWNED). An output_dir inside the model's folder
    writes only into its own folder and is allowed."""
    name = recipe.model.name_or_path
    if name == TINY or not looks_like_local_path(name) or not Path(name).expanduser().is_dir():
        return
    model = Path(name).expanduser().resolve()
    output = Path(os.path.realpath(output_dir_of(recipe)))
    if output == model:
        raise RecipeError(
            f"output_dir: {output_dir_of(recipe)!r} is the model's folder (model.name_or_path {name!r}): "
            "saving the run would overwrite the base model; give another output_dir"
        )
    if model.is_relative_to(output) and model.relative_to(output).parts[0].startswith(RUN_OWNED):
        raise RecipeError(
            f"output_dir: {output_dir_of(recipe)!r} holds the model (model.name_or_path {name!r}) in a "
            "folder a run deletes or replaces (checkpoint rotation, --overwrite); copy the model "
            "elsewhere or give another output_dir"
        )


def check_model_config(folder: Path | None) -> None:
    """Refuse a model folder whose config.json is not a JSON object (a truncated download, a
    hand edit): the prompt-length check and transformers would each fail on it with a traceback."""
    path = folder / "config.json" if folder is not None else None
    if path is None or not path.is_file():
        return
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise RecipeError(
            f"model.name_or_path: {str(path)!r} is not readable JSON ({error}); the model folder is "
            "damaged: download or save the model again"
        ) from None
    if not isinstance(config, dict):
        raise RecipeError(
            f"model.name_or_path: {str(path)!r} holds a {type(config).__name__}, not a model config "
            "(a JSON object); download or save the model again"
        )


def check_model_path(recipe: Recipe, offline_cache: bool = True) -> None:
    """Refuse a model path that looks local but does not exist (it would be tried as a hub id),
    and (`offline_cache`) a hub model that is not cached when HF_HUB_OFFLINE forbids downloading it."""
    name = recipe.model.name_or_path
    if looks_like_local_path(name) and not Path(name).expanduser().exists():
        raise RecipeError(f"model.name_or_path: {name!r} does not exist")
    if name == TINY and Path(TINY).is_dir():
        raise RecipeError(
            f"model.name_or_path: {TINY!r} names both the built-in tiny CPU model and the folder "
            f"{str(Path(TINY).resolve())!r} here; write './{TINY}' to train that folder, or run from "
            "another directory to build the built-in one"
        )
    if name != TINY and offline_cache:
        check_cached_when_offline(name, recipe.model.revision)


def check_completion_fits_the_tiny_model(recipe: Recipe, folder: Path | None) -> None:
    """The built-in tiny model before a run builds it: no files for the prompt-length check, but
    its positions are known (TINY_MAX_POSITIONS), and a max_completion_length that fills them
    would generate past them for minutes."""
    if recipe.model.name_or_path != TINY or (folder is not None and (folder / "config.json").is_file()):
        return  # a folder on disk: check_prompt_lengths reads its own max_position_embeddings
    completion = int(recipe.training.get("max_completion_length") or grpo_default("max_completion_length"))
    if completion >= TINY_MAX_POSITIONS:
        raise RecipeError(
            f"max_completion_length: {completion} leaves no room for a prompt in the built-in tiny model's "
            f"{TINY_MAX_POSITIONS} positions (max_position_embeddings); give less than {TINY_MAX_POSITIONS}"
        )


def model_files(recipe: Recipe) -> Path | None:
    """The folder holding the model's config.json and tokenizer, when it is on disk already:
    a local folder, the tiny model a previous run built, or a hub model in the local cache."""
    name = recipe.model.name_or_path
    if name == TINY:
        return Path(output_dir_of(recipe)) / TINY_MODEL_DIR
    local = Path(name).expanduser()
    if local.is_dir():
        return local
    from huggingface_hub import try_to_load_from_cache  # imported by `datasets` already

    try:
        cached = try_to_load_from_cache(name, "config.json", revision=recipe.model.revision)
    except ValueError:  # not a valid hub id either; loading the model will say so
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def check_one_gpu_per_process(n_gpu: int, recipe_source: str, model_init_kwargs: Mapping[str, Any]) -> None:
    """Refuse, before the model loads, the launch TRL refuses after: one process, several GPUs.

    `n_gpu` is `TrainingArguments.n_gpu`: the number of visible GPUs when no launcher set up a
    process group (`self._n_gpu = torch.cuda.device_count()`, transformers/training_args.py:1917),
    else 1. `Trainer.__init__` resets it to 1 only for a model split over devices with `device_map`
    (`self.args._n_gpu = 1`, transformers/trainer.py:490), and then
    GRPOTrainer raises "does not support `nn.DataParallel`" on `args.n_gpu > 1`
    (trl/trainer/grpo_trainer.py:975).
    """
    if n_gpu <= 1 or model_init_kwargs.get("device_map") is not None:
        return
    raise RecipeError(
        f"{n_gpu} GPUs are visible to one process, and TRL's GRPOTrainer refuses nn.DataParallel "
        f"(n_gpu > 1) after the model loads: run `CUDA_VISIBLE_DEVICES=0 gspo-trl train {recipe_source}` "
        f"for one GPU, or one process per GPU: `accelerate launch --num_processes {n_gpu} -m gspo_trl.train "
        f"--config {recipe_source}`"
    )


def preflight(recipe: Recipe, processes: int | None = None, model_cached: bool = True) -> PreparedData:
    """Run every model-free check on `recipe`; returns its data. Raises a UserError.

    One report: the recipe's problems (gspo_trl.config.validation.find_problems) and the data's
    (a missing reward column, null gold values, too few rows...) come together, so a recipe with
    a typo and a wrong column takes one run of `validate` to fix, not two. A check that reads a
    key that could not be read (or rewards that do not resolve) is skipped, not guessed at.
    Warnings (a reward that can never act) go to the `gspo_trl` logger.

    `model_cached=False` (`gspo-trl validate`) skips the check that an offline hub model is in
    the cache: a recipe is valid before its model is downloaded, and validate says so instead;
    nor does it ask the hub whether a `push_to_hub` run could push (its token and HF_HUB_OFFLINE
    are checked by both)."""
    processes = processes or world_size()
    problems = find_problems(recipe, processes)
    run = problems.run
    reward_keys = (REWARDS_KEY, "imports", "heldout")
    for warning in run(check_reward_construction, recipe, reads=reward_keys) or ():
        logger.warning(warning)
    for warning in run(lora_rate_warnings, recipe, reads=("model.lora", "learning_rate")) or ():
        logger.warning(warning)
    run(check_model_path, recipe, model_cached, reads=("model.name_or_path", "model.revision"))
    if recipe.probes:  # importing the probes' base imports torch: only for a recipe that names some
        from gspo_trl.training.recipe_probes import recipe_probes

        run(recipe_probes, recipe.probes, reads=("probes",))
    push = (bool(recipe.training.get("push_to_hub")), recipe.training.get("hub_model_id"))
    run(check_hub_push, *push, not model_cached, reads=("push_to_hub", "hub_model_id"))
    run(check_output_dir, output_dir_of(recipe), reads=("output_dir",))
    run(check_output_dir_spares_model, recipe, reads=("output_dir", "model.name_or_path"))
    # a refusal below marks its key: the data is not loaded on a refused size or model config
    run(check_synthetic_rows, recipe, reads=("data",), marks=("data",))
    folder = run(model_files, recipe, reads=("model.name_or_path", "model.revision"))
    run(check_model_config, folder, reads=("model.name_or_path",), marks=("model.name_or_path",))
    generation_keys = (*ROLLOUT_KEYS, "max_completion_length")
    run(_check_generation_fits, recipe, processes, folder, reads=generation_keys, marks=("data",))
    tiny_keys = ("max_completion_length", "model.name_or_path")
    run(check_completion_fits_the_tiny_model, recipe, folder, reads=tiny_keys)
    data_keys = (*reward_keys, "data", "model.name_or_path")
    data = run(_checked_data, recipe, processes, folder, problems, reads=data_keys)
    if not problems.errors:  # seconds of import: only for a recipe that is otherwise fine
        run(check_vllm_imports, recipe, reads=("use_vllm",))
    problems.raise_if_any()
    return data


def _check_generation_fits(recipe: Recipe, processes: int, folder: Path | None) -> None:
    """One process's generation fits in memory (gspo_trl.training.safety.input_sizes)."""
    batch = rollout_batch(recipe.training, processes)  # the batch checks ran first: it is one TRL takes
    check_generation_fits(recipe, batch.per_device_train_batch_size * batch.steps_per_generation, folder)


def _checked_data(recipe: Recipe, processes: int, folder: Path | None, problems: Any) -> PreparedData:
    """The data loaded with every row checked, the columns the rewards read, and one batch's rows."""
    from gspo_trl.data.loading import load_splits, training_splits  # `datasets` is slow: only when needed

    budget = prompt_budget(recipe, folder)
    splits = load_splits(recipe.data, required_columns=sorted(required_columns(recipe)))
    for split in splits:  # rows in source order, so an error names a row by its index in the file
        check_code_tests(recipe, split.rows, split.source)
        check_prompt_lengths(split.rows, split.source, budget)
    train, evaluation = training_splits(splits, recipe.data)
    check_columns(recipe, train.column_names)
    problems.run(check_rows_fill_a_batch, recipe, len(train), processes, reads=ROLLOUT_KEYS)
    if recipe.heldout is not None and evaluation is None:
        problems.add(RecipeError("heldout: needs a held-out split; set data.eval_split or data.eval_size"))
    return PreparedData(train, evaluation)
