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
from collections.abc import Mapping
from typing import Any

from gspo_trl.config.batch import BATCH_KEYS, RolloutBatch, is_server_mode, rollout_batch, training_nodes
from gspo_trl.config.engine_checks import check_engine_settings, check_vllm_for_moe
from gspo_trl.config.fields import build_dataclass
from gspo_trl.config.invariants import check_off_policy, check_training_invariants
from gspo_trl.config.moe_checks import check_moe_model, check_moe_settings
from gspo_trl.config.problems import Problems
from gspo_trl.config.recipe import Recipe
from gspo_trl.config.reward_checks import check_reward_construction, check_rewards
from gspo_trl.config.sections import DiagnosticsConfig
from gspo_trl.config.shipped import find_accelerate_config
from gspo_trl.errors import RecipeError

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


def _check_launch(recipe: Recipe) -> None:
    """The `launch:` section is what `gspo-trl plan` plans: refuse values it cannot use."""
    launch = recipe.launch
    if launch is None:
        return
    if launch.nodes < 1 or launch.gpus_per_node < 0:
        raise RecipeError(
            f"launch.nodes: {launch.nodes} / launch.gpus_per_node: {launch.gpus_per_node}; "
            "expected nodes >= 1 and gpus_per_node >= 0 (0: a CPU run)"
        )
    memory = launch.gpu_memory_gb
    if memory is not None and not (math.isfinite(memory) and memory > 0):
        raise RecipeError(f"launch.gpu_memory_gb: {memory} must be a positive number of GB, e.g. 80")
    seconds = launch.seconds_per_step
    if len(seconds) > 2 or not all(math.isfinite(s) and s > 0 for s in seconds) or seconds != sorted(seconds):
        raise RecipeError(
            f"launch.seconds_per_step: {seconds}; expected [typical] or [low, high] positive seconds"
        )
    _check_server_layout(recipe)
    config = launch.accelerate_config
    if config is None:
        return
    if find_accelerate_config(config) is None:
        raise RecipeError(
            f"launch.accelerate_config: {config!r} is neither a file nor a shipped accelerate config "
            "(configs/ddp.yaml, configs/zero2.yaml, configs/zero3.yaml, ...)"
        )
    if launch.command and config not in launch.command:
        raise RecipeError(
            f"launch.command does not pass launch.accelerate_config ({config}): the plan would size "
            "another launch than the one the command starts"
        )


def _check_server_layout(recipe: Recipe) -> None:
    launch = recipe.launch
    tp, dp = launch.server_tensor_parallel_size, launch.server_data_parallel_size
    if (tp is None and dp is None) or not is_server_mode(recipe.training):
        return  # no server to lay out (e.g. `--use_vllm false` for a CPU check of a server recipe)
    tp, dp = tp or 1, dp or 1
    if tp < 1 or dp < 1 or tp * dp != launch.gpus_per_node:
        raise RecipeError(
            f"launch.server_tensor_parallel_size {tp} x server_data_parallel_size {dp} must use the "
            f"server node's launch.gpus_per_node ({launch.gpus_per_node}) GPUs"
        )
    command = launch.command or ""
    if "--vllm-tp" in command and not (f"--vllm-tp {tp}" in command and f"--vllm-dp {dp}" in command):
        raise RecipeError(
            f"launch.command does not pass --vllm-tp {tp} --vllm-dp {dp}, the layout launch states"
        )


FINITE_FIELDS = ("max_steps", "num_train_epochs", "warmup_steps", "weight_decay", "max_grad_norm")


def _check_field_range(training: Mapping[str, Any], key: str) -> None:
    """POSITIVE_FIELDS finite and > 0, FINITE_FIELDS finite, when set to a number."""
    value = training.get(key)
    if key in POSITIVE_FIELDS:
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return
        if not math.isfinite(value) or value <= 0:
            raise RecipeError(f"{key}: {value} must be a finite number > 0")
    elif isinstance(value, float) and not math.isfinite(value):
        raise RecipeError(f"{key}: {value} must be a finite number")


def _check_field_ranges(training: Mapping[str, Any]) -> None:
    for key in (*POSITIVE_FIELDS, *FINITE_FIELDS):
        _check_field_range(training, key)


def check_gspo_settings(algorithm: str, training: Mapping[str, Any], level_explicit: bool = True) -> None:
    """The checks that need only the training settings: shared by recipes and `GSPOConfig`."""
    _check_field_ranges(training)
    check_training_invariants(algorithm, training, level_explicit)


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
    build_dataclass(DiagnosticsConfig, recipe.diagnostics, "diagnostics")


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
    processes = processes or world_size()
    problems = Problems(recipe.source, recipe.load_problems, recipe.unreadable)
    run = problems.run
    level_explicit = "importance_sampling_level" in recipe.explicit_keys
    for key in (*POSITIVE_FIELDS, *FINITE_FIELDS):  # a value refused here is not refused again below
        run(_check_field_range, recipe.training, key, marks=(key,))
    invariants = (recipe.algorithm, recipe.training, level_explicit)
    run(check_training_invariants, *invariants, reads=TRAINING_INVARIANT_KEYS)
    run(_check_launch, recipe)
    batch = run(_check_batch_sizes, recipe, processes, reads=ROLLOUT_KEYS)
    if batch is not None:
        off_policy = (recipe.algorithm, batch.on_policy, recipe.allow_on_policy)
        run(check_off_policy, *off_policy, reads=("algorithm", "allow_on_policy"))
        moe = (recipe.moe, recipe.training, recipe.engine, batch.on_policy)
        run(check_moe_settings, *moe, reads=("engine", "moe"), marks=("moe",))
    check_rewards(recipe, problems)
    run(_check_heldout, recipe)
    run(_check_model, recipe)
    run(check_precision, recipe)
    run(_check_diagnostics, recipe)
    run(check_engine_settings, recipe.engine, recipe.training)
    run(check_vllm_for_moe, recipe.model.name_or_path, recipe.training, reads=("model",))
    run(check_moe_model, recipe.model.name_or_path, recipe.moe, reads=("model", "moe"))
    run(_check_trackers, recipe, reads=("report_to",))
    problems.raise_if_any()
