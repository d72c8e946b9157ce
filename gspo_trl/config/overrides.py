"""Command-line overrides of a recipe: `--key value` tokens, merged into the recipe's mapping.

The same keys as the YAML (torchtune's and TRL's convention): `--learning_rate 5e-7`, dotted
keys for sections (`--model.name_or_path Qwen/Qwen3-4B`), one reward's field by its 0-based
index (`--rewards.1.weight 0.5`). Values are read as YAML only for lists and mappings; the
recipe loader converts the rest to each field's declared type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from gspo_trl.config.problems import Problems
from gspo_trl.config.recipe_file import load_yaml_text
from gspo_trl.config.sections import SECTION_NAMES as SECTIONS
from gspo_trl.core.errors import RecipeError


def _override_value(text: str) -> Any:
    """A command-line value: YAML for lists and mappings, else the text itself.

    Scalars stay text and are converted by the field's declared type later, so that
    `--save_strategy no` stays "no" (YAML 1.1 would read no/off/yes/on as booleans).
    """
    if text.lstrip().startswith(("[", "{")):
        try:
            return load_yaml_text(text, f"override value {text[:40]!r}")
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


def apply_overrides(content: dict[str, Any], overrides: dict[str, Any], problems: Problems) -> None:
    """Merge `overrides` into `content`; an override that cannot apply is recorded in `problems`."""
    for key, value in overrides.items():
        section, dot, sub_key = key.partition(".")
        if dot and section == "rewards":
            problems.run(_override_reward, content, key, value)
        elif dot and section in SECTIONS:
            target = content.setdefault(section, {})
            if not isinstance(target, dict):
                problems.add(RecipeError(f"override --{key}: recipe key {section!r} is not a mapping"))
                continue
            target[sub_key] = value
        else:
            content[key] = value
