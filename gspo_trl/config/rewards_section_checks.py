"""The `rewards:` section checked: weights, names, parameters, metric names, construction.

Each reward is checked on its own, so three unknown rewards are three lines of one report
(gspo_trl.config.problems). A name no reward has, but that a module in the working directory
registers, is answered with the `imports:` line the recipe probably lacks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gspo_trl.rewards as rewards
from gspo_trl.config.problems import Problems
from gspo_trl.config.recipe import Recipe
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.core.errors import RecipeError
from gspo_trl.rewards.loading import modules_registering

REWARDS_KEY = "rewards"
"""Marked unreadable when a reward does not resolve or take its parameters: the checks that build
the rewards or read the columns they need (gspo_trl.training.preflight) are skipped, not repeated."""


def imports_hint(spec: str, flag: str = "imports: [{}]") -> str:
    """'; did you forget `imports: [module]`?' when a module in the working directory registers
    reward `spec` (read as text, not imported), else ''; `flag` spells the fix (`--import {}`)."""
    if ":" in spec:
        return ""  # a path names its module already
    modules = modules_registering(spec)
    return f"; did you forget `{flag.format(', '.join(modules))}`?" if modules else ""


def check_reward_weights(weights: Sequence[float]) -> None:
    """Every weight 0: each completion's summed reward is 0, every advantage 0, and the run trains
    on nothing while exiting 0. Shared by recipes and `GSPOConfig(reward_weights=...)`."""
    if weights and all(float(w) == 0 for w in weights):
        raise RecipeError(
            f"every reward weight is 0 ({len(weights)} reward(s)): each completion's total reward is 0, "
            "so every advantage is 0 and the run would train on nothing; give one reward a non-zero weight"
        )


def check_rewards(recipe: Recipe, problems: Problems) -> None:
    """Record every reward that cannot work; skipped when `rewards:` or `imports:` could not be read
    (an unread `imports:` would make every custom reward look unknown)."""
    if problems.cannot_read(("rewards", "imports")):
        return
    if "reward_weights" in recipe.explicit_keys:
        fix = "give each reward its weight in `rewards:` ({name: ..., weight: ...})"
        problems.add(RecipeError(f"reward_weights: {fix}"))
    specs = [(f"rewards[{i}] ({entry.spec})", entry) for i, entry in enumerate(recipe.rewards)]
    resolved = True
    for where, entry in specs:
        if not math.isfinite(entry.weight):
            problems.add(RecipeError(f"{where}.weight: {entry.weight} must be a finite number"))
        resolved &= _check_reward(where, entry.spec, entry.params, problems)
    if recipe.heldout is not None and recipe.heldout.reward:
        _check_reward("heldout.reward", recipe.heldout.reward, {}, problems)
    problems.run(check_reward_weights, [entry.weight for entry in recipe.rewards])
    if resolved:
        problems.run(_check_metric_names, recipe)


def _check_reward(where: str, spec: str, params: dict, problems: Problems) -> bool:
    """Whether reward `spec` resolves and takes `params`; the problem recorded when not."""
    try:
        rewards.describe(spec)
    except rewards.UnknownRewardError as error:
        problems.add(RecipeError(f"{where}: {error}{imports_hint(spec)}"), REWARDS_KEY)
        return False
    try:
        rewards.validate_params(spec, params)
    except rewards.RewardParameterError as error:
        problems.add(RecipeError(f"{where}: {error}"), REWARDS_KEY)
    return True


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


def check_reward_construction(recipe: Recipe) -> list[str]:
    """Build each reward once, so its own value checks (e.g. `math` workers >= 0) refuse here;
    returns a warning for each reward that, so configured, can never act in this run.

    `validate_params` checks names and types only; a reward's constructor checks values and
    is cheap (pools and sandboxes start on first use), so `validate` and `train` refuse alike.
    A reward may say why it would score every completion alike under the run's completion cap
    (`never_acts(max_completion_length) -> str | None`, e.g. soft_overlong's 4096-token limit
    against 16-token completions): a warning, not a refusal, since a CPU check of a GPU recipe
    with a small `--max_completion_length` is such a run on purpose.
    """
    cap = int(recipe.training.get("max_completion_length") or grpo_default("max_completion_length"))
    warnings = []
    for index, entry in enumerate(recipe.rewards):
        try:
            reward = rewards.get(entry.spec, **entry.params)
        except (rewards.UnknownRewardError, rewards.RewardParameterError) as error:
            raise RecipeError(f"rewards[{index}] ({entry.spec}): {error}") from None
        never_acts = getattr(reward, "never_acts", None)
        reason = never_acts(cap) if callable(never_acts) else None
        if reason:
            warnings.append(f"{recipe.source}: rewards[{index}] ({entry.spec}) can never act: {reason}")
    return warnings
