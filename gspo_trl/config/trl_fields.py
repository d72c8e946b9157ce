"""TRL's `GRPOConfig` fields (names, types, defaults) without importing TRL.

Importing `trl.GRPOConfig` pulls in transformers' TrainingArguments and torch: about 5 s
on a small machine, only to learn which keys a recipe may use. The loader reads a
snapshot of the fields instead (`grpo_fields.json`, written by `snapshot()` for one TRL
version) and imports TRL only when the installed version differs from the snapshot's.
A test compares the snapshot with the live class, so it cannot drift unnoticed.

Types are simplified to what a YAML or command-line value can be: enums become `str`,
`list[X]` becomes `list`, classes the recipe cannot spell become `Any`.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.metadata
import json
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal, Union

SNAPSHOT = Path(__file__).with_name("grpo_fields.json")
_SIMPLE = {"None": type(None), "bool": bool, "int": int, "float": float, "str": str, "list": list}
_SIMPLE |= {"dict": dict, "Any": Any}
_NO_DEFAULT = "<no default>"


def _simple_names(annotation: Any) -> list[str]:
    """An annotation as a sorted list of simple type names (see the module docstring)."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return sorted({name for member in typing.get_args(annotation) for name in _simple_names(member)})
    if origin is Literal:
        return sorted(
            {type(value).__name__ if value is not None else "None" for value in typing.get_args(annotation)}
        )
    if origin in (list, tuple) or annotation in (list, tuple):
        return ["list"]
    if origin is dict or annotation is dict:
        return ["dict"]
    if annotation is type(None):
        return ["None"]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return ["str"]
    name = getattr(annotation, "__name__", "Any")
    return [name if name in _SIMPLE else "Any"]


def _json_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return _NO_DEFAULT
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        json.dumps(value)
    except TypeError:
        return _NO_DEFAULT
    return value


def describe_live() -> dict[str, Any]:
    """The snapshot content for the installed TRL (imports it: slow)."""
    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    fields = {
        field.name: {"type": _simple_names(hints.get(field.name, Any)), "default": _json_default(field)}
        for field in dataclasses.fields(GRPOConfig)
    }
    return {"trl_version": importlib.metadata.version("trl"), "fields": fields}


def snapshot(path: Path = SNAPSHOT) -> Path:
    """Write the installed TRL's field table to `path` (run after upgrading TRL)."""
    path.write_text(json.dumps(describe_live(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


@cache
def _table() -> dict[str, Any]:
    try:
        installed = importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if SNAPSHOT.is_file():
        stored = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
        if stored["trl_version"] == installed:
            return stored
    return describe_live()


def grpo_field_types() -> dict[str, Any]:
    """GRPOConfig field name -> simplified type (a union of None/bool/int/float/str/list/dict/Any)."""
    table = {}
    for name, info in _table()["fields"].items():
        members = tuple(_SIMPLE[member] for member in info["type"])
        table[name] = members[0] if len(members) == 1 else Union[members]  # noqa: UP007
    return table


def grpo_default(name: str) -> Any:
    """TRL's default for a GRPOConfig field (None when it has none a recipe could spell)."""
    value = _table()["fields"][name]["default"]
    return None if value == _NO_DEFAULT else value


if __name__ == "__main__":
    print(f"wrote {snapshot()}")
