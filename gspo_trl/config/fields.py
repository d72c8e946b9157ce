"""Recipe sections from YAML: the fields' declared types, and dataclasses built from mappings.

Values are converted by gspo_trl.core.coercion.coerce, the one coercion that reward parameters and
command-line overrides use too (YAML 1.1 reads `1e-6` as text; every override is text).
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cache
from typing import Any

from gspo_trl.config.problems import Problems
from gspo_trl.core import coercion
from gspo_trl.core.errors import FieldTypeError, RecipeError, ValueTypeError
from gspo_trl.core.suggest import did_you_mean


@cache
def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved type annotation of a dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """`value` as `annotation`: gspo_trl.core.coercion.coerce (the package's one coercion, which reward
    parameters use too), its error raised as the recipe layer's FieldTypeError."""
    try:
        return coercion.coerce(value, annotation, where)
    except ValueTypeError as error:
        raise FieldTypeError(str(error)) from None


def read_fields(
    cls: type, values: dict[str, Any], where: str
) -> tuple[dict[str, Any], dict[str, FieldTypeError]]:
    """`values` read as dataclass `cls`'s fields: the keyword arguments of the keys that could be
    read, and key -> FieldTypeError for each key that could not (unknown, with the name meant, or
    of the wrong type), so a section with three bad keys is reported in three lines at once."""
    types_by_name = field_types(cls)
    kwargs, errors = {}, {}
    for key, value in values.items():
        if key not in types_by_name:
            errors[key] = FieldTypeError(f"{where}.{key}: unknown key{did_you_mean(key, types_by_name)}")
            continue
        try:
            kwargs[key] = coerce(value, types_by_name[key], f"{where}.{key}")
        except FieldTypeError as error:
            errors[key] = error
    return kwargs, errors


def instantiate(cls: type, kwargs: dict[str, Any]) -> Any:
    """`cls(**kwargs)`; a value the section's own `__post_init__` refuses (ValueError/TypeError)
    is raised as a RecipeError with its message, so every caller reports a bad section the same way."""
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as error:
        if isinstance(error, RecipeError):
            raise
        raise RecipeError(str(error)) from None


def build_dataclass(cls: type, values: dict[str, Any], where: str) -> Any:
    """Instantiate dataclass `cls` (a recipe section) from `values`, raising its first problem
    (`read_fields`, then `instantiate`); `read_section` records them all instead."""
    kwargs, errors = read_fields(cls, values, where)
    if errors:
        raise next(iter(errors.values()))
    return instantiate(cls, kwargs)


def read_section(problems: Problems, cls: type, values: dict[str, Any], name: str) -> Any:
    """Section `name` as dataclass `cls`, every problem in it recorded in `problems`.

    A key that cannot be read is reported and keeps its default, marked unreadable as
    `name.key` so checks reading it are skipped; the keys that could be read are still built
    and checked, by the section's own `__post_init__` too. A value that refuses marks the whole
    section and gives None (nothing is left to build). Messages name the recipe file, as the
    loader's do.
    """
    kwargs, errors = read_fields(cls, values, name)
    for key, error in errors.items():
        problems.add(RecipeError(f"recipe {problems.source}: {error}"), f"{name}.{key}")
    try:
        return instantiate(cls, kwargs)
    except RecipeError as error:
        problems.add(RecipeError(f"recipe {problems.source}: {error}"), name)
        return None
