"""Refuse recipes that would silently not be GSPO or would fail later, before anything loads.

Each check raises RecipeError with the key at fault and the fix; `validate` runs them all and
reports every refusal at once (gspo_trl.config.problems). GSPO's own invariants (ratio
level, loss aggregation, clip range, off-policy updates) live in gspo_trl.config.invariants,
shared with `GSPOConfig`; here are the recipe's other checks (field ranges, batch
divisibility TRL would refuse later, rewards, sections, trackers).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from gspo_trl.config.batch import BATCH_KEYS, RolloutBatch, is_server_mode, rollout_batch, training_nodes
from gspo_trl.config.invariants import check_off_policy, check_training_invariants
from gspo_trl.config.launch_checks import LAUNCH_CHECKS, LAUNCH_SIZE_KEYS, check_launch_counts
from gspo_trl.config.optional_packages import PACKAGE_CHECKS
from gspo_trl.config.problems import Problems
from gspo_trl.config.recipe import Recipe
from gspo_trl.config.rewards_section_checks import check_reward_construction, check_rewards
from gspo_trl.config.sections import HeldoutConfig
from gspo_trl.config.sections.engine import check_engine_settings
from gspo_trl.config.sections.moe import check_moe_model, check_moe_settings, check_vllm_for_moe
from gspo_trl.config.sections.sampling import check_sampling_settings
from gspo_trl.core.errors import RecipeError

__all__ = ["check_gspo_settings", "check_precision", "check_reward_construction", "validate", "world_size"]

POSITIVE_FIELDS = (
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_completion_length",
    "max_prompt_length",
    "num_generations",
    "temperature",
    "num_iterations",
    "steps_per_generation",
    "generation_batch_size",
)
"""Training fields that must be finite and > 0 when set (0 or negative fails deep inside
torch or TRL with a traceback, or silently trains nothing)."""


def world_size() -> int:
    """Processes in this launch (accelerate/torchrun set WORLD_SIZE); 1 when run directly."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _check_batch_sizes(recipe: Recipe, processes: int) -> RolloutBatch:
    """TRL's batch refusals with the recipe's key names, at `processes` and on the `launch:`
    hardware; a real multi-process launch of another size is checked at its own size only.
    Returns the rollout batch at `processes`."""
    batch = rollout_batch(recipe.training, processes)
    launch = recipe.launch
    if launch is None or not launch.gpus:
        return batch
    nodes = training_nodes(launch.nodes, is_server_mode(recipe.training))
    if nodes < 1:
        raise RecipeError(
            f"launch.nodes: {launch.nodes} with vllm_mode: server leaves no node to train (the vLLM "
            "server node trains nothing); give 2 or more nodes, or use vllm_mode: colocate"
        )
    world = nodes * launch.gpus_per_node
    if "WORLD_SIZE" in os.environ and world_size() != world:
        return batch  # launched on other hardware than `launch:` states: TRL checks the real world size
    try:
        rollout_batch(recipe.training, world)
    except RecipeError as error:
        where = f"launch ({nodes} training node(s) x {launch.gpus_per_node} GPUs = {world} processes)"
        raise RecipeError(f"{where}: {error}") from None
    return batch


FINITE_FIELDS = ("max_steps", "num_train_epochs", "warmup_steps", "weight_decay", "max_grad_norm")
SEED_FIELDS = ("seed", "data_seed")
SEED_LIMIT = 2**32
"""Seeds reach numpy's `np.random.seed(seed)` (transformers/trainer_utils.py:191, `set_seed`), which
takes 0 <= seed < 2**32 and raises "Seed must be between 0 and 2**32 - 1" at the start of training."""


def _check_field_range(training: Mapping[str, Any], key: str) -> None:
    """POSITIVE_FIELDS finite and > 0, FINITE_FIELDS finite, SEED_FIELDS in numpy's range, when
    set to a number."""
    value = training.get(key)
    if key in POSITIVE_FIELDS:
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return
        if not math.isfinite(value) or value <= 0:
            raise RecipeError(f"{key}: {value} must be a finite number > 0")
    elif key in SEED_FIELDS:
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < SEED_LIMIT:
            raise RecipeError(f"{key}: {value} must be between 0 and 2**32 - 1 (numpy's seed range)")
    elif isinstance(value, float) and not math.isfinite(value):
        raise RecipeError(f"{key}: {value} must be a finite number")


def _check_field_ranges(training: Mapping[str, Any]) -> None:
    for key in (*POSITIVE_FIELDS, *FINITE_FIELDS, *SEED_FIELDS):
        _check_field_range(training, key)


def check_gspo_settings(algorithm: str, training: Mapping[str, Any], level_explicit: bool = True) -> None:
    """The checks that need only the training settings: shared by recipes and `GSPOConfig`."""
    _check_field_ranges(training)
    check_training_invariants(algorithm, training, level_explicit)


def _check_heldout_k(heldout: HeldoutConfig) -> None:
    if any(k < 1 for k in heldout.k):
        raise RecipeError(f"heldout.k: {heldout.k}; every k must be >= 1")


def _check_heldout_samples(heldout: HeldoutConfig) -> None:
    if heldout.num_samples is not None and heldout.k and heldout.num_samples < max(heldout.k):
        raise RecipeError(
            f"heldout.num_samples: {heldout.num_samples} is fewer than the largest k ({max(heldout.k)})"
        )


def _check_heldout_rows(heldout: HeldoutConfig) -> None:
    if heldout.max_rows < 1 or heldout.every_steps < 0:
        raise RecipeError("heldout.max_rows must be >= 1 and heldout.every_steps >= 0")


def _check_heldout_temperatures(heldout: HeldoutConfig) -> None:
    if (heldout.temperature is not None and heldout.temperature < 0) or heldout.sample_temperature <= 0:
        raise RecipeError("heldout.temperature must be >= 0 (0 = greedy) and heldout.sample_temperature > 0")


HELDOUT_CHECKS: tuple[tuple[Callable[[HeldoutConfig], None], tuple[str, ...]], ...] = (
    (_check_heldout_k, ("heldout.k",)),
    (_check_heldout_samples, ("heldout.num_samples", "heldout.k")),
    (_check_heldout_rows, ("heldout.max_rows", "heldout.every_steps")),
    (_check_heldout_temperatures, ("heldout.temperature", "heldout.sample_temperature")),
)
"""Each check of the `heldout:` values, with the keys it reads (gspo_trl.config.problems.Problems.run)."""


MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")


def _check_model(recipe: Recipe) -> None:
    dtype = recipe.model.dtype
    if dtype is not None and dtype not in MODEL_DTYPES:
        raise RecipeError(f"model.dtype: {dtype!r} is not one of {', '.join(MODEL_DTYPES)}")


def check_precision(recipe: Recipe) -> None:
    """`model.allow_pure_bf16` only means something for bfloat16 weights; anywhere else it
    would be an option accepted and never used, so it is refused with the key to change."""
    if recipe.model.allow_pure_bf16 and recipe.model.dtype != "bfloat16":
        raise RecipeError(
            f"model.allow_pure_bf16: true keeps bfloat16 weights, but model.dtype is {recipe.model.dtype!r}. "
            "Set model.dtype: bfloat16, or remove model.allow_pure_bf16."
        )


TRACKER_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    "trackio": (("trackio",), "trackio"),
    "mlflow": (("mlflow",), "mlflow"),
    "comet_ml": (("comet_ml",), "comet-ml"),
    "clearml": (("clearml",), "clearml"),
    "neptune": (("neptune",), "neptune"),
    "dvclive": (("dvclive",), "dvclive"),
    "swanlab": (("swanlab",), "swanlab"),
    "codecarbon": (("codecarbon",), "codecarbon"),
    "azure_ml": (("azureml",), "azureml-core"),
    "dagshub": (("dagshub",), "dagshub"),
    "flyte": (("flytekit",), "flytekit"),
}
"""report_to name -> (modules any one of which the Trainer's integration imports, pip package)."""


def _check_trackers(recipe: Recipe) -> None:
    """A tracker in report_to whose package is missing crashes `train` after the model loads."""
    import importlib.util

    report_to = recipe.training.get("report_to") or []
    for name in [report_to] if isinstance(report_to, str) else list(report_to):
        if name not in TRACKER_PACKAGES:
            continue  # "none", "all" (whatever is installed) and names TRL itself refuses
        modules, package = TRACKER_PACKAGES[name]
        if not any(importlib.util.find_spec(module) for module in modules):
            raise RecipeError(
                f"report_to: {name!r} needs the {package!r} package, which is not installed: "
                f"`pip install {package}`, or drop it from report_to (metrics.jsonl is always written)"
            )


TRAINING_INVARIANT_KEYS = ("algorithm", "importance_sampling_level", "loss_type", "epsilon", "epsilon_high")
ROLLOUT_KEYS = (*BATCH_KEYS, "generation_batch_size", "steps_per_generation", "use_vllm", "vllm_mode")
"""The keys GSPO's invariants and the rollout batch read: a check of either is skipped when one
of its keys could not be read (its default would stand in, and the refusal be about a value
the user never wrote)."""


def validate(recipe: Recipe, processes: int | None = None) -> None:
    """Raise every setting that breaks GSPO or would fail later, with the recipe's own loading
    problems (`load_recipe(..., partial=True)`), in one error (gspo_trl.config.problems)."""
    find_problems(recipe, processes).raise_if_any()


def find_problems(recipe: Recipe, processes: int | None = None, installed: bool = True) -> Problems:
    """What `validate` raises, not raised yet: the preflight adds the data's problems to it.
    `installed=False` (`gspo-trl plan`, arithmetic for other machines) leaves out the checks of
    what this machine has installed (trackers, optional packages, its vLLM's MoE weight sync)."""
    processes = processes or world_size()
    problems = Problems(recipe.source, recipe.load_problems, recipe.unreadable)
    run = problems.run
    level_explicit = "importance_sampling_level" in recipe.explicit_keys
    for key in (*POSITIVE_FIELDS, *FINITE_FIELDS, *SEED_FIELDS):  # refused here, not again below
        run(_check_field_range, recipe.training, key, marks=(key,))
    invariants = (recipe.algorithm, recipe.training, level_explicit)
    run(check_training_invariants, *invariants, reads=TRAINING_INVARIANT_KEYS)
    if recipe.launch is not None:
        run(check_launch_counts, recipe.launch, reads=LAUNCH_SIZE_KEYS, marks=LAUNCH_SIZE_KEYS)
        for check, reads in LAUNCH_CHECKS:
            run(check, recipe.launch, recipe, reads=reads)
    batch_keys = (*ROLLOUT_KEYS, *LAUNCH_SIZE_KEYS)  # refused: later batch checks are skipped
    batch = run(_check_batch_sizes, recipe, processes, reads=batch_keys, marks=ROLLOUT_KEYS)
    if batch is not None:
        off_policy = (recipe.algorithm, batch.on_policy, recipe.allow_on_policy)
        run(check_off_policy, *off_policy, reads=("algorithm", "allow_on_policy"))
        moe = (recipe.moe, recipe.training, recipe.engine, batch.on_policy)
        run(check_moe_settings, *moe, reads=("engine", "moe"), marks=("moe",))
    check_rewards(recipe, problems)
    for check, reads in HELDOUT_CHECKS if recipe.heldout is not None else ():
        run(check, recipe.heldout, reads=reads)
    run(_check_model, recipe)
    run(check_precision, recipe, reads=("model.dtype", "model.allow_pure_bf16"))
    run(check_engine_settings, recipe.engine, recipe.training, reads=("engine",))
    run(check_sampling_settings, recipe.sampling, recipe.training, reads=("sampling",))
    run(check_moe_model, recipe.model.name_or_path, recipe.moe, reads=("model.name_or_path", "moe"))
    if not installed:
        return problems
    run(check_vllm_for_moe, recipe.model.name_or_path, recipe.training, reads=("model.name_or_path",))
    run(_check_trackers, recipe, reads=("report_to",))
    for check, reads in PACKAGE_CHECKS:  # what `train` would import before its first step
        run(check, recipe, reads=reads)
    return problems
