"""Recipe sections from YAML: the fields' declared types, and dataclasses built from mappings.

Values are converted by gspo_trl.rewards.coercion.coerce, the one coercion that reward parameters and
command-line overrides use too (YAML 1.1 reads `1e-6` as text; every override is text).
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cache
from typing import Any

from gspo_trl.errors import FieldTypeError, RecipeError
from gspo_trl.rewards import coercion
from gspo_trl.rewards.errors import ValueTypeError
from gspo_trl.rewards.suggest import did_you_mean


@cache
def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved type annotation of a dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """`value` as `annotation`: gspo_trl.rewards.coercion.coerce (the package's one coercion, which reward
    parameters use too), its error raised as the recipe layer's FieldTypeError."""
    try:
        return coercion.coerce(value, annotation, where)
    except ValueTypeError as error:
        raise FieldTypeError(str(error)) from None


def build_dataclass(cls: type, values: dict[str, Any], where: str) -> Any:
    """Instantiate dataclass `cls` (a recipe section) from `values`: unknown keys and values of
    the wrong type raise FieldTypeError, and a value the section's own `__post_init__` refuses
    (ValueError/TypeError) is raised as a RecipeError with its message, so every caller
    reports a bad section the same way."""
    types_by_name = field_types(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in types_by_name:
            raise FieldTypeError(f"{where}.{key}: unknown key{did_you_mean(key, types_by_name)}")
        kwargs[key] = coerce(value, types_by_name[key], f"{where}.{key}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as error:
        if isinstance(error, RecipeError):
            raise
        raise RecipeError(str(error)) from None
