"""Recipes: a YAML file of model + data + rewards + any TRL GRPOConfig field, plus overrides.

    algorithm: gspo                  # gspo (default) | gspo_token | grpo
    model: {name_or_path: Qwen/Qwen3-1.7B, dtype: bfloat16}
    data: {path: open-r1/DAPO-Math-17k-Processed, name: en, solution_column: solution}
    rewards: [math, {name: format, weight: 0.2}]
    learning_rate: 1.0e-6            # any GRPOConfig field, at the top level
    diagnostics: {length_buckets: [256, 1024, 4096]}
    engine: {old_logprobs: engine}   # pi_old from vLLM's log-probs (docs/engine-logprobs.md)
    launch: {nodes: 1, gpus_per_node: 8, gpu_memory_gb: 80, accelerate_config: configs/zero2.yaml}

Command-line overrides use the same keys, TRL-style: `--learning_rate 5e-7`, and dotted keys
for sections: `--model.name_or_path Qwen/Qwen3-4B`, `--rewards "[math, format]"`, and one
reward's field by its 0-based index: `--rewards.1.weight 0.5`. Values
are read as YAML, then converted to the type each field declares.

Precedence, lowest first: the algorithm's defaults (gspo_trl.config.defaults), the recipe file,
the overrides. `load_recipe` parses and type-checks; `gspo_trl.config.validation` then refuses
settings that break GSPO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gspo_trl.config.defaults import ALGORITHMS
from gspo_trl.config.fields import build_dataclass, coerce, did_you_mean
from gspo_trl.config.sections import DataConfig, HeldoutConfig, LaunchConfig, ModelConfig, RewardEntry
from gspo_trl.config.shipped import resolve_recipe_path
from gspo_trl.config.trl_fields import grpo_field_types
from gspo_trl.errors import FieldTypeError, RecipeError
from gspo_trl.rewards import loading as reward_loading
from gspo_trl.rewards import registry as rewards_registry
from gspo_trl.rewards.errors import RewardParameterError, UnknownRewardError

SECTIONS = ("model", "data", "rewards", "diagnostics", "heldout", "engine", "launch")
RECIPE_KEYS = ("algorithm", "allow_on_policy", "imports")

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
    diagnostics: dict[str, Any] = field(default_factory=dict)
    heldout: HeldoutConfig | None = None
    allow_on_policy: bool = False
    engine: dict[str, Any] = field(default_factory=dict)
    """`engine:` section (gspo_trl.config.sections.EngineConfig): where pi_old comes from."""
    imports: list[str] = field(default_factory=list)
    """Modules (or .py files) imported before the rewards resolve: they register custom rewards."""
    launch: LaunchConfig | None = None
    """`launch:` section: the hardware and command the recipe is written for (`gspo-trl plan`)."""
    explicit_keys: frozenset[str] = frozenset()
    """Training keys set by the recipe or an override (not by defaults): validation uses it."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


MAX_RECIPE_BYTES = 256 << 10
"""A recipe is a page of keys (the largest shipped one is under 5 KB), and PyYAML's safe loader
takes seconds per 100 KB (26 s for 1.3 MB on this project's 2-core machine): a larger file is
a mistake (a data file given as the recipe), refused before it is parsed."""


def _read_bounded(path: Path) -> str:
    """The file's text, reading at most MAX_RECIPE_BYTES + 1 bytes (a FIFO or /dev/zero too)."""
    with path.open("rb") as file:
        data = file.read(MAX_RECIPE_BYTES + 1)
    if len(data) > MAX_RECIPE_BYTES:
        raise RecipeError(
            f"recipe {path}: larger than {MAX_RECIPE_BYTES >> 10} KiB, not a recipe "
            "(a data file goes in data.path)"
        )
    return data.decode("utf-8")


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The recipe file as a mapping, or a RecipeError naming the file (and line for syntax)."""
    path = Path(path)
    try:
        text = _read_bounded(path)
    except FileNotFoundError:
        raise RecipeError(
            f"recipe {path}: file not found (shipped recipes: `gspo-trl recipes list`)"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise RecipeError(f"recipe {path}: cannot read it ({error})") from None
    try:
        content = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise RecipeError(f"recipe {path}:{where}: YAML error: {problem}") from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise RecipeError(f"recipe {path}: must be a mapping of keys to values, got {type(content).__name__}")
    return content


def _override_value(text: str) -> Any:
    """A command-line value: YAML for lists and mappings, else the text itself.

    Scalars stay text and are converted by the field's declared type later, so that
    `--save_strategy no` stays "no" (YAML 1.1 would read no/off/yes/on as booleans).
    """
    if text.lstrip().startswith(("[", "{")):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise RecipeError(f"override value {text!r}: YAML error: {error}") from None
    return text


def parse_overrides(tokens: Sequence[str]) -> dict[str, Any]:
    """`--key value`, `--key=value`, `--flag` (true) -> {key: value} (see `_override_value`)."""
    overrides: dict[str, Any] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if not token.startswith("--") or token == "--":
            raise RecipeError(f"override {token!r}: expected --key value")
        key, has_value, value = token[2:].partition("=")
        if not has_value:
            if index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
                value, index = tokens[index + 1], index + 1
            else:
                value = "true"
        overrides[key.replace("-", "_")] = _override_value(value)
        index += 1
    return overrides


def _override_reward(content: dict[str, Any], key: str, value: Any) -> None:
    """`--rewards.1.weight 0.5`: one field of one reward (0-based, as `rewards[1]` in errors)."""
    _, index_text, field_name = key.split(".", 2) if key.count(".") >= 2 else (key, "", "")
    entries = content.get("rewards")
    if not index_text.isdigit() or not field_name:
        raise RecipeError(f"override --{key}: expected --rewards.INDEX.FIELD, e.g. --rewards.1.weight 0.5")
    if not isinstance(entries, list) or int(index_text) >= len(entries):
        count = len(entries) if isinstance(entries, list) else 0
        raise RecipeError(f"override --{key}: the recipe has {count} reward(s), indexed from 0")
    entry = entries[int(index_text)]
    entry = {"name": entry} if isinstance(entry, str) else dict(entry)
    entry[field_name] = value
    entries[int(index_text)] = entry


def _apply_overrides(content: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        section, dot, sub_key = key.partition(".")
        if dot and section == "rewards":
            _override_reward(content, key, value)
        elif dot and section in SECTIONS:
            target = content.setdefault(section, {})
            if not isinstance(target, dict):
                raise RecipeError(f"override --{key}: recipe key {section!r} is not a mapping")
            target[sub_key] = value
        else:
            content[key] = value


def _reward_entries(raw: Any) -> list[RewardEntry]:
    if not isinstance(raw, list) or not raw:
        raise RecipeError("rewards: must be a non-empty list, e.g. [math, {name: format, weight: 0.2}]")
    entries = []
    for index, item in enumerate(raw):
        if isinstance(item, str):
            entries.append(RewardEntry(item))
            continue
        if not isinstance(item, dict) or "name" not in item:
            raise RecipeError(f"rewards[{index}]: expected a name or a mapping with 'name', got {item!r}")
        params = dict(item)
        name = params.pop("name")
        try:
            weight = coerce(params.pop("weight", 1.0), float, f"rewards[{index}].weight")
        except FieldTypeError as error:
            raise RecipeError(str(error)) from None
        entries.append(RewardEntry(str(name), weight, params))
    return entries


def _section(content: dict[str, Any], name: str) -> dict[str, Any]:
    value = content.get(name) or {}
    if not isinstance(value, dict):
        raise RecipeError(f"{name}: must be a mapping, got {value!r}")
    return value


def _typed_params(entry: RewardEntry) -> dict[str, Any]:
    """A reward's parameters as its signature types them (an override's "4096" is saved as 4096);
    as given when the reward does not resolve (validation reports that, with its index)."""
    try:
        return rewards_registry.validate_params(entry.spec, entry.params)
    except (UnknownRewardError, RewardParameterError):
        return dict(entry.params)


def recipe_as_yaml(recipe: Recipe) -> str:
    """The recipe fully resolved (defaults and overrides applied), in the recipe file format.

    Saved next to every trained model, so a run says exactly what produced it and can be
    rerun or evaluated with `load_recipe` on this file.
    """
    content: dict[str, Any] = {
        "algorithm": recipe.algorithm,
        "allow_on_policy": recipe.allow_on_policy,
        **({"imports": list(recipe.imports)} if recipe.imports else {}),
        "model": asdict(recipe.model),
        "data": asdict(recipe.data),
        "rewards": [
            {"name": entry.spec, "weight": entry.weight, **_typed_params(entry)} for entry in recipe.rewards
        ],
        "diagnostics": dict(recipe.diagnostics),
        **({"heldout": asdict(recipe.heldout)} if recipe.heldout is not None else {}),
        **({"engine": dict(recipe.engine)} if recipe.engine else {}),
        **({"launch": asdict(recipe.launch)} if recipe.launch is not None else {}),
        **recipe.training,
    }
    header = f"# Resolved by gspo-trl from {recipe.source} (defaults and overrides applied).\n"
    return header + yaml.safe_dump(content, sort_keys=False)


def load_recipe(path: str | Path | None, overrides: Sequence[str] | dict[str, Any] = ()) -> Recipe:
    """Read, merge and type-check a recipe; unknown keys are refused with a suggestion.

    `path` None starts from an empty recipe (all defaults), which the tests and the demo use.
    """
    if path is not None:
        path = resolve_recipe_path(path)
    content = read_yaml(path) if path is not None else {}
    source = str(path) if path is not None else "<defaults>"
    parsed_overrides = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    _apply_overrides(content, parsed_overrides)

    grpo_fields = grpo_field_types()
    known = set(SECTIONS) | set(RECIPE_KEYS) | set(grpo_fields)
    for key in content:
        if key in MOVED_KEYS:
            raise RecipeError(
                f"recipe {source}: {key!r} is not a recipe key here: use {MOVED_KEYS[key]} "
                "(a recipe is not a `trl grpo` config: docs/recipe-reference.md)"
            )
        if key not in known:
            raise RecipeError(f"recipe {source}: unknown key {key!r}{did_you_mean(key, known)}")

    algorithm = content.get("algorithm", "gspo")
    if algorithm not in ALGORITHMS:
        raise RecipeError(f"algorithm: {algorithm!r} is not one of {sorted(ALGORITHMS)}")

    training = dict(ALGORITHMS[algorithm])
    explicit = set()
    try:
        for key, value in content.items():
            if key in grpo_fields:
                training[key] = coerce(value, grpo_fields[key], key)
                explicit.add(key)
        model = build_dataclass(ModelConfig, _section(content, "model"), "model")
        data = build_dataclass(DataConfig, _section(content, "data"), "data")
        heldout = (
            build_dataclass(HeldoutConfig, _section(content, "heldout"), "heldout")
            if "heldout" in content
            else None
        )
        launch = (
            build_dataclass(LaunchConfig, _section(content, "launch"), "launch")
            if "launch" in content
            else None
        )
        allow_on_policy = coerce(content.get("allow_on_policy", False), bool, "allow_on_policy")
        raw_imports = content.get("imports") or []
        imports = coerce([raw_imports] if isinstance(raw_imports, str) else raw_imports, list[str], "imports")
    except FieldTypeError as error:
        raise RecipeError(f"recipe {source}: {error}") from None
    try:
        reward_loading.import_modules(imports)  # before anything resolves a reward name
    except UnknownRewardError as error:
        raise RecipeError(f"recipe {source}: {error}") from None
    if "generation_batch_size" in explicit and "steps_per_generation" not in explicit:
        training.pop("steps_per_generation", None)  # TRL derives it; it refuses both being set

    return Recipe(
        source=source,
        algorithm=algorithm,
        model=model,
        data=data,
        rewards=_reward_entries(content.get("rewards")),
        training=training,
        diagnostics=_section(content, "diagnostics"),
        heldout=heldout,
        allow_on_policy=allow_on_policy,
        engine=_section(content, "engine"),
        imports=imports,
        launch=launch,
        explicit_keys=frozenset(explicit),
    )
