"""Refuse recipes that would silently not be GSPO, before any model or dataset loads.

Each check raises RecipeError with the key at fault and the fix. What it guards against is
explained in docs/gspo.md: token-sum losses weight responses by length; with every update on-policy
s_i = 1 and GSPO is GRPO; clip ranges outside (0, 1) are meaningless; and configurations TRL
would refuse later (batch divisibility) are caught here with the recipe's own key names.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import rewards
from gspo_trl.config.defaults import EPSILON_CLIP_LOSSES, TOKEN_SUM_LOSSES
from gspo_trl.config.engine_checks import check_engine_settings, check_vllm_for_moe
from gspo_trl.config.fields import build_dataclass
from gspo_trl.config.recipe import Recipe
from gspo_trl.config.sections import DiagnosticsConfig
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.errors import FieldTypeError, RecipeError

logger = logging.getLogger(__name__)

GSPO_ALGORITHMS = ("gspo", "gspo_token")

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


def _check_algorithm_consistency(recipe: Recipe) -> None:
    level = recipe.training.get("importance_sampling_level")
    explicit = "importance_sampling_level" in recipe.explicit_keys
    if recipe.algorithm == "gspo" and level != "sequence":
        raise RecipeError(
            f"importance_sampling_level: {level!r} gives token-level ratios, i.e. GRPO, while "
            "algorithm is gspo. Remove the key, or set algorithm: grpo (or gspo_token)."
        )
    if recipe.algorithm == "grpo" and level == "sequence" and explicit:
        raise RecipeError("importance_sampling_level: 'sequence' is GSPO; set algorithm: gspo instead.")
    if level not in ("token", "sequence"):
        raise RecipeError(f"importance_sampling_level: {level!r} is not 'token' or 'sequence'")


def _check_loss_aggregation(algorithm: str, training: Mapping[str, Any]) -> None:
    loss_type = training.get("loss_type")
    if algorithm in GSPO_ALGORITHMS and loss_type in TOKEN_SUM_LOSSES:
        raise RecipeError(
            f"loss_type: {loss_type!r} sums over tokens, weighting responses by their length; "
            "GSPO averages over tokens within a response, then over responses. "
            "Use loss_type: grpo (the default here)."
        )


def updates_per_rollout_batch(training: dict, processes: int) -> int:
    """Optimizer steps taken on one rollout batch (1 = every update is on-policy)."""
    accumulation = int(training.get("gradient_accumulation_steps", 1))
    steps = training.get("steps_per_generation")
    if steps is None:
        generation_batch = training.get("generation_batch_size")
        per_step = (
            int(training.get("per_device_train_batch_size", _trl("per_device_train_batch_size"))) * processes
        )
        steps = generation_batch // per_step if generation_batch else accumulation
    return max(1, int(steps) // accumulation) * int(training.get("num_iterations", 1))


def _check_off_policy(recipe: Recipe, processes: int) -> None:
    if recipe.algorithm not in GSPO_ALGORITHMS or recipe.allow_on_policy:
        return
    if updates_per_rollout_batch(recipe.training, processes) <= 1:
        raise RecipeError(
            "steps_per_generation / gradient_accumulation_steps / num_iterations: every update is "
            "on-policy, so s_i = 1, nothing is ever clipped and GSPO is exactly GRPO. Use several "
            "minibatch updates per rollout batch (paper: steps_per_generation: 4 with "
            "gradient_accumulation_steps: 1), or set allow_on_policy: true to run it anyway."
        )


def _check_batch_sizes(recipe: Recipe, processes: int) -> None:
    training = recipe.training
    if "generation_batch_size" in recipe.explicit_keys and "steps_per_generation" in recipe.explicit_keys:
        raise RecipeError(
            "generation_batch_size and steps_per_generation: set one of them, not both "
            "(generation_batch_size = per_device_train_batch_size x processes x steps_per_generation)"
        )
    num_generations = int(training.get("num_generations") or _trl("num_generations"))
    if num_generations < 2:
        raise RecipeError(f"num_generations: {num_generations}; group advantages need at least 2")
    per_device = int(training.get("per_device_train_batch_size", _trl("per_device_train_batch_size")))
    generation_batch = training.get("generation_batch_size")
    if generation_batch is None:
        steps = int(training.get("steps_per_generation") or training.get("gradient_accumulation_steps", 1))
        generation_batch = per_device * processes * steps
        how = (
            f"per_device_train_batch_size ({per_device}) x {processes} process(es) "
            f"x steps_per_generation ({steps})"
        )
    else:
        how = "generation_batch_size"
        if generation_batch % (per_device * processes):
            raise RecipeError(
                f"generation_batch_size: {generation_batch} is not divisible by per_device_train_batch_size "
                f"({per_device}) x {processes} process(es)"
            )
    if generation_batch % num_generations:
        raise RecipeError(
            f"num_generations: the generation batch, {how} = {generation_batch}, must hold whole "
            f"groups of num_generations ({num_generations}). Change per_device_train_batch_size or "
            "num_generations so that it divides."
        )


def _check_clip_range(algorithm: str, training: Mapping[str, Any]) -> None:
    if training.get("loss_type") not in EPSILON_CLIP_LOSSES:
        return
    for key in ("epsilon", "epsilon_high"):
        value = training.get(key)
        if value is not None and not 0 < value < 1:
            raise RecipeError(
                f"{key}: {value} must be strictly between 0 and 1 (it is a half-width around a ratio "
                "of 1; GSPO paper: epsilon 3e-4, epsilon_high 4e-4)"
            )
    if algorithm in GSPO_ALGORITHMS and max(training["epsilon"], training.get("epsilon_high") or 0) >= 0.05:
        logger.warning(
            "epsilon %s / epsilon_high %s is a token-level clip range; a sequence ratio averages |y| "
            "token log-ratios and rarely moves that far, so almost nothing will be clipped. "
            "Measure with `gspo-trl calibrate` (paper: 3e-4 / 4e-4).",
            training["epsilon"],
            training.get("epsilon_high"),
        )


def _check_field_ranges(training: Mapping[str, Any]) -> None:
    for key in POSITIVE_FIELDS:
        value = training.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value) or value <= 0:
            raise RecipeError(f"{key}: {value} must be a finite number > 0")
    for key in ("max_steps", "num_train_epochs", "warmup_steps", "weight_decay", "max_grad_norm"):
        value = training.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            raise RecipeError(f"{key}: {value} must be a finite number")


def check_gspo_settings(algorithm: str, training: Mapping[str, Any]) -> None:
    """The checks that need only the training settings: shared by recipes and `GSPOConfig`."""
    _check_field_ranges(training)
    _check_loss_aggregation(algorithm, training)
    _check_clip_range(algorithm, training)


def _trl(key: str) -> Any:
    return grpo_default(key)


def _check_rewards(recipe: Recipe) -> None:
    if "reward_weights" in recipe.explicit_keys:
        raise RecipeError(
            "reward_weights: give each reward its weight in `rewards:` ({name: ..., weight: ...})"
        )
    for index, entry in enumerate(recipe.rewards):
        if not math.isfinite(entry.weight):
            raise RecipeError(
                f"rewards[{index}] ({entry.spec}).weight: {entry.weight} must be a finite number"
            )
    specs = [
        (f"rewards[{i}] ({entry.spec})", entry.spec, entry.params) for i, entry in enumerate(recipe.rewards)
    ]
    if recipe.heldout is not None and recipe.heldout.reward:
        specs.append(("heldout.reward", recipe.heldout.reward, {}))
    for where, spec, params in specs:
        try:
            rewards.describe(spec)
            rewards.validate_params(spec, params)
        except (rewards.UnknownRewardError, rewards.RewardParameterError) as error:
            raise RecipeError(f"{where}: {error}") from None
    _check_metric_names(recipe)


def _check_metric_names(recipe: Recipe) -> None:
    """Two rewards logged under one name would merge their curves: each needs its own `label`."""
    seen: dict[str, int] = {}
    for index, entry in enumerate(recipe.rewards):
        name = str(entry.params.get("label") or rewards.describe(entry.spec).name)
        if name in seen:
            raise RecipeError(
                f"rewards[{index}] ({entry.spec}): logs under the name {name!r}, as rewards[{seen[name]}] "
                "does; give one of them a `label: ...` so their metrics stay apart"
            )
        seen[name] = index


def _check_heldout(recipe: Recipe) -> None:
    heldout = recipe.heldout
    if heldout is None:
        return
    if any(k < 1 for k in heldout.k):
        raise RecipeError(f"heldout.k: {heldout.k}; every k must be >= 1")
    if heldout.num_samples is not None and heldout.k and heldout.num_samples < max(heldout.k):
        raise RecipeError(
            f"heldout.num_samples: {heldout.num_samples} is fewer than the largest k ({max(heldout.k)})"
        )
    if heldout.max_rows < 1 or heldout.every_steps < 0:
        raise RecipeError("heldout.max_rows must be >= 1 and heldout.every_steps >= 0")
    if (heldout.temperature is not None and heldout.temperature < 0) or heldout.sample_temperature <= 0:
        raise RecipeError("heldout.temperature must be >= 0 (0 = greedy) and heldout.sample_temperature > 0")


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


def _check_diagnostics(recipe: Recipe) -> None:
    try:
        build_dataclass(DiagnosticsConfig, recipe.diagnostics, "diagnostics")
    except (FieldTypeError, ValueError, TypeError) as error:
        raise RecipeError(str(error)) from None


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


def validate(recipe: Recipe, processes: int | None = None) -> None:
    """Raise RecipeError for the first setting that breaks GSPO or would fail later."""
    processes = processes or world_size()
    _check_algorithm_consistency(recipe)
    check_gspo_settings(recipe.algorithm, recipe.training)
    _check_batch_sizes(recipe, processes)
    _check_off_policy(recipe, processes)
    _check_rewards(recipe)
    _check_heldout(recipe)
    _check_model(recipe)
    check_precision(recipe)
    _check_diagnostics(recipe)
    check_engine_settings(recipe.engine, recipe.training)
    check_vllm_for_moe(recipe.model.name_or_path, recipe.training)
    _check_trackers(recipe)


def check_reward_construction(recipe: Recipe) -> None:
    """Build each reward once, so its own value checks (e.g. `math` workers >= 0) refuse here.

    `validate_params` checks names and types only; a reward's constructor checks values and
    is cheap (pools and sandboxes start on first use), so `validate` and `train` refuse alike.
    """
    for index, entry in enumerate(recipe.rewards):
        try:
            rewards.get(entry.spec, **entry.params)
        except (rewards.UnknownRewardError, rewards.RewardParameterError) as error:
            raise RecipeError(f"rewards[{index}] ({entry.spec}): {error}") from None
