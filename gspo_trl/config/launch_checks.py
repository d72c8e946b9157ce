"""The `launch:` section's values: what `gspo-trl plan` plans, refused when it cannot use them.

One check per value (or pair of values that must agree), each with the keys it reads, so
`validate` reports every bad value of the section at once and skips a check whose key could
not be read (its default would stand in for a value the user never wrote).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gspo_trl.config.batch import is_server_mode
from gspo_trl.config.recipe import Recipe
from gspo_trl.config.sections import LaunchConfig
from gspo_trl.config.shipped import find_accelerate_config
from gspo_trl.core.errors import RecipeError

LAUNCH_SIZE_KEYS = ("launch.nodes", "launch.gpus_per_node")
"""The keys that size the launch: the rollout batch is checked at their world size too."""


def check_launch_counts(launch: LaunchConfig) -> None:
    """Nodes and GPUs a launch can have; run before (and, refused, instead of) the batch check at
    the launch's world size (gspo_trl.config.validation), which reads them too."""
    if launch.nodes < 1 or launch.gpus_per_node < 0:
        raise RecipeError(
            f"launch.nodes: {launch.nodes} / launch.gpus_per_node: {launch.gpus_per_node}; "
            "expected nodes >= 1 and gpus_per_node >= 0 (0: a CPU run)"
        )


def _check_memory(launch: LaunchConfig, recipe: Recipe) -> None:
    memory = launch.gpu_memory_gb
    if memory is not None and not (math.isfinite(memory) and memory > 0):
        raise RecipeError(f"launch.gpu_memory_gb: {memory} must be a positive number of GB, e.g. 80")


def _check_seconds(launch: LaunchConfig, recipe: Recipe) -> None:
    seconds = launch.seconds_per_step
    if len(seconds) > 2 or not all(math.isfinite(s) and s > 0 for s in seconds) or seconds != sorted(seconds):
        raise RecipeError(
            f"launch.seconds_per_step: {seconds}; expected [typical] or [low, high] positive seconds"
        )


def _check_server_layout(launch: LaunchConfig, recipe: Recipe) -> None:
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


def _check_accelerate_config(launch: LaunchConfig, recipe: Recipe) -> None:
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


SERVER_KEYS = ("use_vllm", "vllm_mode")

LAUNCH_CHECKS: tuple[tuple[Callable[[LaunchConfig, Recipe], None], tuple[str, ...]], ...] = (
    (_check_memory, ("launch.gpu_memory_gb",)),
    (_check_seconds, ("launch.seconds_per_step",)),
    (
        _check_server_layout,
        (
            "launch.server_tensor_parallel_size",
            "launch.server_data_parallel_size",
            "launch.gpus_per_node",
            "launch.command",
            *SERVER_KEYS,
        ),
    ),
    (_check_accelerate_config, ("launch.accelerate_config", "launch.command")),
)
"""Each other check of the `launch:` values, with the keys it reads (Problems.run skips it when one
could not be read)."""
