"""What `GSPOTrainer(...)` makes of TRL-style arguments, so the Python API trains as a recipe does.

- no `args`: `GSPOConfig(f"{model_name}-GSPO")`, GSPO's defaults (gspo_trl.config.defaults), where
  TRL would build a token-level DAPO `GRPOConfig`;
- a plain `GRPOConfig` that is not GSPO is refused, naming each field that differs from GSPO and
  its GSPO value; one whose ratio, loss, clip range, beta and off-policy updates are GSPO's is
  accepted as it is;
- a reward name (`"math"`, `["math", "format"]`, `"pkg.module:fn"`) resolves through the reward
  registry, as a recipe's `rewards:` does; a hub id (`org/name`) or a local folder stays TRL's
  reward model. Reward functions get the recipe's per-call checks
  (gspo_trl.training.safety.reward_output_checks).
Why refused and not warned, the TRL lines and each wish's spelling: docs/gspo.md ("In TRL").
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_callable_name, get_config_model_id

import gspo_trl.rewards as rewards
from gspo_trl.config.batch import RolloutBatch
from gspo_trl.config.defaults import GSPO_DEFAULTS
from gspo_trl.core.errors import RecipeError
from gspo_trl.rewards.registry import columns_read
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.safety.reward_output_checks import (
    AsyncCheckedReward,
    CheckedReward,
    with_reward_checks,
)

ALGORITHM_FIELDS = ("importance_sampling_level", "loss_type", "beta", "epsilon", "epsilon_high")
"""The GRPOConfig fields that decide which algorithm runs; each must hold GSPO's value."""


def gspo_trainer_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """`GSPOTrainer(*args, **kwargs)` as keyword arguments for `GRPOTrainer.__init__`: GSPO's
    config when none is given, a non-GSPO `GRPOConfig` refused, reward names resolved."""
    bound = inspect.signature(GRPOTrainer.__init__).bind(None, *args, **kwargs)
    arguments = dict(bound.arguments)
    arguments.pop("self", None)
    model = arguments.get("model")
    config = arguments.get("args")
    if config is None:
        name = model if isinstance(model, str) else get_config_model_id(model.config)
        arguments["args"] = GSPOConfig(f"{name.rstrip('/').split('/')[-1]}-GSPO")
    elif isinstance(config, GRPOConfig) and not isinstance(config, GSPOConfig):
        check_plain_grpo_config(config)
    if arguments.get("reward_funcs") is not None:
        arguments["reward_funcs"] = resolve_reward_funcs(arguments["reward_funcs"])
        for split in ("train_dataset", "eval_dataset"):
            check_reward_columns(arguments["reward_funcs"], arguments.get(split), split)
    return arguments


def check_reward_columns(reward_funcs: Sequence[Any], dataset: Any, split: str = "train_dataset") -> None:
    """Refuse, in `__init__`, a dataset without a column a reward reads (a recipe's preflight
    does the same): TRL finds out at the first rollout's reward call, after the model loaded and
    generated, in a 165-line traceback. Every missing column of every reward in one message; a
    dataset that does not know its columns (a generator-backed IterableDataset) is not checked."""
    columns = getattr(dataset, "column_names", None)
    if not isinstance(columns, list):
        return
    missing = []
    for index, func in enumerate(reward_funcs):
        wanted = columns_read(getattr(func, "func", func))  # a CheckedReward reads what it wraps
        lacking = sorted(set(wanted) - set(columns))
        if lacking:
            missing.append(f"reward_funcs[{index}] ({get_callable_name(func)}) reads {lacking}")
    if missing:
        raise RecipeError(
            f"{split} has columns {sorted(columns)}, but {'; '.join(missing)}: TRL passes each dataset "
            "column to the rewards by name; add or rename the column (dataset.rename_column), or give "
            "the reward's parameter a default"
        )


def not_gspo_fields(config: GRPOConfig) -> list[str]:
    """`field=value (GSPO: value)` for each algorithm field of `config` that is not GSPO's, and
    the on-policy schedule (every update on-policy: s_i = 1, GSPO is GRPO)."""
    differ = [
        f"{key}={getattr(config, key)!r} (GSPO: {GSPO_DEFAULTS[key]!r})"
        for key in ALGORITHM_FIELDS
        if getattr(config, key) != GSPO_DEFAULTS[key]
    ]
    if RolloutBatch.from_grpo_config(config).on_policy:
        differ.append(
            f"steps_per_generation={config.steps_per_generation!r} with gradient_accumulation_steps="
            f"{config.gradient_accumulation_steps!r}: every update on-policy (GSPO: "
            f"{GSPO_DEFAULTS['steps_per_generation']} updates per rollout batch)"
        )
    return differ


def check_plain_grpo_config(config: GRPOConfig) -> None:
    """Refuse a plain `GRPOConfig` that would not train GSPO, naming the fields."""
    differ = not_gspo_fields(config)
    if differ:
        raise RecipeError(
            f"GSPOTrainer(args=GRPOConfig(...)) is not GSPO: {'; '.join(differ)}. Pass "
            "GSPOConfig(...) from gspo_trl instead (GSPO's defaults; same field names), or use "
            "trl.GRPOTrainer for TRL's GRPO"
        )


def _is_reward_model_id(spec: str) -> bool:
    """A hub id (`org/name`, never a `:`) or a local folder: TRL loads it as a reward model."""
    return ":" not in spec and ("/" in spec or Path(spec).expanduser().is_dir())


def resolve_reward_funcs(reward_funcs: Any) -> list[Any]:
    """Registered names and `module:function` specs as ready reward functions, every reward
    function checked on each call; reward-model ids and modules as given."""
    funcs = reward_funcs if isinstance(reward_funcs, list | tuple) else [reward_funcs]
    resolved = [
        rewards.get(func) if isinstance(func, str) and not _is_reward_model_id(func) else func
        for func in funcs
    ]
    if any(isinstance(func, CheckedReward | AsyncCheckedReward) for func in resolved):
        return resolved  # build_trainer checked them already
    return with_reward_checks(resolved)
