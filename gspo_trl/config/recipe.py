"""Recipes: a YAML file of model + data + rewards + any TRL GRPOConfig field, plus overrides.

    algorithm: gspo                  # gspo (default) | gspo_token | grpo
    model: {name_or_path: Qwen/Qwen3-1.7B, dtype: bfloat16}
    data: {path: open-r1/DAPO-Math-17k-Processed, name: en, solution_column: solution}
    rewards: [math, {name: format, weight: 0.2}]
    learning_rate: 1.0e-6            # any GRPOConfig field, at the top level

Command-line overrides use the same keys, TRL-style: `--learning_rate 5e-7`, dotted keys for
sections (`--model.name_or_path Qwen/Qwen3-4B`) and one reward's field by its 0-based index
(`--rewards.1.weight 0.5`). Values are read as YAML, then converted to the type each field
declares. Precedence, lowest first: the algorithm's defaults (gspo_trl.config.defaults), the
recipe file, the overrides. `load_recipe` parses and type-checks; `gspo_trl.config.validation`
then refuses settings that break GSPO. Every section and key: docs/recipe-reference.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gspo_trl.config.defaults import ALGORITHMS
from gspo_trl.config.fields import coerce, read_section
from gspo_trl.config.overrides import apply_overrides, parse_overrides
from gspo_trl.config.problems import Problems
from gspo_trl.config.recipe_file import read_yaml
from gspo_trl.config.sections import (
    SECTION_NAMES,
    SECTIONS,
    DataConfig,
    DiagnosticsConfig,
    EngineConfig,
    HeldoutConfig,
    LaunchConfig,
    ModelConfig,
    MoeConfig,
    RewardEntry,
    SamplingConfig,
)
from gspo_trl.config.shipped import resolve_recipe_path
from gspo_trl.config.trl_fields import grpo_field_types
from gspo_trl.core.errors import FieldTypeError, RecipeError, RewardParameterError, UnknownRewardError
from gspo_trl.core.suggest import did_you_mean
from gspo_trl.rewards import loading as reward_loading
from gspo_trl.rewards import registry as rewards_registry

__all__ = ["Recipe", "load_recipe", "parse_overrides", "read_yaml", "recipe_as_yaml"]

TYPED_SECTIONS = tuple(section for section in SECTIONS if section.absent != "list")
"""The sections read into one dataclass each (model and data first), all but `rewards:`."""
RECIPE_KEYS = ("algorithm", "allow_on_policy", "imports", "packing", "probes")

MOVED_KEYS = {
    # TRL / open-r1 script arguments that are not GRPOConfig fields here
    "dataset_name": "data.path",
    "dataset_config": "data.name",
    "dataset_train_split": "data.split",
    "dataset_test_split": "data.eval_split",
    "model_name_or_path": "model.name_or_path",
    "model_revision": "model.revision",
    "torch_dtype": "model.dtype",
    "dtype": "model.dtype",
    "attn_implementation": "model.attn_implementation",
    "trust_remote_code": "model.trust_remote_code",
    "use_peft": "model.lora (a mapping of peft.LoraConfig fields)",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.lora_alpha",
    "lora_target_modules": "model.lora.target_modules",
    "system_prompt": "data.system_prompt",
    "chat_template": "model.chat_template",
    "reward_funcs": "rewards (a list of names or {name, weight, ...})",
    # a GRPOConfig field a recipe must not set: resuming is a property of the launch
    "resume_from_checkpoint": "the command line: gspo-trl train RECIPE --resume",
}
"""Keys a TRL `trl grpo` config or an open-r1 recipe uses, and where they live in a recipe."""


@dataclass
class Recipe:
    """A parsed recipe. `training` holds GRPOConfig keyword arguments, defaults applied."""

    source: str
    algorithm: str
    model: ModelConfig
    data: DataConfig
    rewards: list[RewardEntry]
    training: dict[str, Any]
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    heldout: HeldoutConfig | None = None
    allow_on_policy: bool = False
    engine: EngineConfig = field(default_factory=EngineConfig)
    """`engine:` section: where pi_old comes from."""
    moe: MoeConfig = field(default_factory=MoeConfig)
    """`moe:` section: routing replay for MoE models."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """`sampling:` section: dynamic sampling (drop groups whose rewards tie, refill the batch)."""
    packing: bool = False
    """Padding-free log-prob forwards (docs/performance.md "Packing")."""
    imports: list[str] = field(default_factory=list)
    """Modules (or .py files) imported before the rewards resolve: they register custom rewards."""
    probes: list[str] = field(default_factory=list)
    """Probe classes as `module:Class` or `file.py:Class` (docs/probes.md), added after the built-in ones."""
    launch: LaunchConfig | None = None
    """`launch:` section: the hardware and command the recipe is written for (`gspo-trl plan`)."""
    explicit_keys: frozenset[str] = frozenset()
    """Training keys set by the recipe or an override (not by defaults): validation uses it."""
    load_problems: tuple[Exception, ...] = ()
    """What loading refused, when loaded with `partial=True`: validation reports it with its own."""
    unreadable: frozenset[str] = frozenset()
    """Keys whose value could not be read (kept at their default): checks reading them are skipped."""


def _reward_entries(raw: Any, problems: Problems) -> list[RewardEntry]:
    """The `rewards:` items; each bad item is recorded (the rest are still read and checked)."""
    if not isinstance(raw, list) or not raw:
        error = RecipeError("rewards: must be a non-empty list, e.g. [math, {name: format, weight: 0.2}]")
        problems.add(error, "rewards")
        return []
    entries = []
    for index, item in enumerate(raw):
        if isinstance(item, str):
            entries.append(RewardEntry(item))
            continue
        if not isinstance(item, dict) or "name" not in item:
            error = RecipeError(f"rewards[{index}]: expected a name or a mapping with 'name', got {item!r}")
            problems.add(error, "rewards")
            continue
        params = dict(item)
        name = params.pop("name")
        try:
            weight = coerce(params.pop("weight", 1.0), float, f"rewards[{index}].weight")
            limit = params.pop("time_limit_s", None)
            limit = None if limit is None else coerce(limit, float, f"rewards[{index}].time_limit_s")
        except FieldTypeError as error:
            problems.add(RecipeError(str(error)), "rewards")
            continue
        if limit is not None and not (math.isfinite(limit) and limit > 0):
            problems.add(
                RecipeError(f"rewards[{index}].time_limit_s: {limit} must be a number of seconds > 0"),
                "rewards",
            )
            continue
        entries.append(RewardEntry(str(name), weight, params, limit))
    return entries


def _section(content: dict[str, Any], name: str, problems: Problems) -> dict[str, Any]:
    value = content.get(name) or {}
    if not isinstance(value, dict):
        problems.add(RecipeError(f"{name}: must be a mapping, got {value!r}"), name)
        return {}
    return value


def _read(problems: Problems, key: str, read: Any, *args: Any) -> Any:
    """`read(*args)`, or None with the problem recorded and `key` marked unreadable."""
    try:
        return read(*args)
    except RecipeError as error:
        problems.add(RecipeError(f"recipe {problems.source}: {error}"), key)
        return None


def _build_section(content: dict[str, Any], cls: type, name: str, problems: Problems) -> Any:
    """Section `name` as dataclass `cls` (each bad key recorded, at its default), or None when it
    is absent or cannot be built."""
    if name not in content:
        return None
    return read_section(problems, cls, _section(content, name, problems), name)


def _typed_params(entry: RewardEntry) -> dict[str, Any]:
    """A reward's parameters as its signature types them (an override's "4096" is saved as 4096);
    as given when the reward does not resolve (validation reports that, with its index)."""
    try:
        return rewards_registry.validate_params(entry.spec, entry.params)
    except (UnknownRewardError, RewardParameterError):
        return dict(entry.params)


def _reward_as_yaml(entry: RewardEntry) -> dict[str, Any]:
    return {
        "name": entry.spec,
        "weight": entry.weight,
        **({"time_limit_s": entry.time_limit_s} if entry.time_limit_s is not None else {}),
        **_typed_params(entry),
    }


def section_as_yaml(section: Any) -> dict[str, Any]:
    """A section's fields as YAML can write them (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(section).items()}


def recipe_as_yaml(recipe: Recipe) -> str:
    """The recipe fully resolved (defaults and overrides applied), in the recipe file format.

    Saved next to every trained model, so a run says exactly what produced it and can be
    rerun or evaluated with `load_recipe` on this file.
    """
    content: dict[str, Any] = {
        "algorithm": recipe.algorithm,
        "allow_on_policy": recipe.allow_on_policy,
        **({"packing": True} if recipe.packing else {}),
        **({"imports": list(recipe.imports)} if recipe.imports else {}),
        **({"probes": list(recipe.probes)} if recipe.probes else {}),
    }
    for section in SECTIONS:
        value = getattr(recipe, section.name)
        if section.absent == "list":
            content[section.name] = [_reward_as_yaml(entry) for entry in value]
        elif section.is_written(value):
            content[section.name] = section_as_yaml(value)
    content.update(recipe.training)
    header = f"# Resolved by gspo-trl from {recipe.source} (defaults and overrides applied).\n"
    return header + yaml.safe_dump(content, sort_keys=False)


def _check_keys(
    content: dict[str, Any], known: set[str], overrides: dict[str, Any], problems: Problems
) -> None:
    """Every key neither a section, a recipe key nor a GRPOConfig field, each with its fix."""
    source = problems.source
    for key in content:
        if key in MOVED_KEYS:
            problems.add(
                RecipeError(
                    f"recipe {source}: {key!r} is not a recipe key here: use {MOVED_KEYS[key]} "
                    "(a recipe is not a `trl grpo` config: docs/recipe-reference.md)"
                ),
                key,
            )
        elif key in overrides and key not in known:
            hint = did_you_mean(key, known, spell="--{}")
            problems.add(RecipeError(f"recipe {source}: override --{key}: unknown key{hint}"), key)
        elif key not in known:
            problems.add(RecipeError(f"recipe {source}: unknown key {key!r}{did_you_mean(key, known)}"), key)


def load_recipe(
    path: str | Path | None, overrides: Sequence[str] | dict[str, Any] = (), *, partial: bool = False
) -> Recipe:
    """Read, merge and type-check a recipe; unknown keys are refused with a suggestion.

    Every problem is found in one pass (gspo_trl.config.problems) and raised together; with
    `partial` (for `validate` and `train`, which validate next) the recipe is returned with
    them in `load_problems`, a key that could not be read at its default, so validation
    reports them with its own. `path` None starts from an empty recipe (all defaults), which
    the tests and the demo use.
    """
    if path is not None:
        path = resolve_recipe_path(path)
    content = read_yaml(path) if path is not None else {}
    source = str(path) if path is not None else "<defaults>"
    problems = Problems(source)
    parsed_overrides = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    apply_overrides(content, parsed_overrides, problems)

    grpo_fields = grpo_field_types()
    _check_keys(content, set(SECTION_NAMES) | set(RECIPE_KEYS) | set(grpo_fields), parsed_overrides, problems)

    algorithm = content.get("algorithm", "gspo")
    if algorithm not in ALGORITHMS:
        problems.add(RecipeError(f"algorithm: {algorithm!r} is not one of {sorted(ALGORITHMS)}"), "algorithm")
        algorithm = "gspo"

    training = dict(ALGORITHMS[algorithm])
    explicit = set()
    for key, value in content.items():
        if key in grpo_fields:
            try:
                training[key] = coerce(value, grpo_fields[key], key)
                explicit.add(key)
            except FieldTypeError as error:
                problems.add(RecipeError(f"recipe {source}: {error}"), key)
    typed = {}
    for section in TYPED_SECTIONS:
        typed[section.name] = _build_section(content, section.kind, section.name, problems)
        if typed[section.name] is None and section.absent == "defaults":
            typed[section.name] = section.kind()
    on_policy = content.get("allow_on_policy", False)
    allow_on_policy = _read(problems, "allow_on_policy", coerce, on_policy, bool, "allow_on_policy")
    packing = _read(problems, "packing", coerce, content.get("packing", False), bool, "packing")
    raw_imports = content.get("imports") or []
    raw_imports = [raw_imports] if isinstance(raw_imports, str) else raw_imports
    imports = _read(problems, "imports", coerce, raw_imports, list[str], "imports") or []
    try:
        reward_loading.import_modules(imports)  # before anything resolves a reward name
    except UnknownRewardError as error:
        problems.add(RecipeError(f"recipe {source}: {error}"), "imports")
    raw_probes = content.get("probes") or []
    raw_probes = [raw_probes] if isinstance(raw_probes, str) else raw_probes
    probes = _read(problems, "probes", coerce, raw_probes, list[str], "probes") or []
    if "generation_batch_size" in explicit and "steps_per_generation" not in explicit:
        training.pop("steps_per_generation", None)  # TRL derives it; it refuses both being set

    recipe = Recipe(
        source=source,
        algorithm=algorithm,
        rewards=_reward_entries(content.get("rewards"), problems),
        training=training,
        allow_on_policy=bool(allow_on_policy),
        packing=bool(packing),
        imports=imports,
        probes=probes,
        **typed,
        explicit_keys=frozenset(explicit),
        load_problems=tuple(problems.errors),
        unreadable=frozenset(problems.unreadable),
    )
    if not partial:
        problems.raise_if_any()
    return recipe
