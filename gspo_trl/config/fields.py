"""Turn YAML and command-line values into the types a dataclass field declares.

Needed because YAML 1.1 reads `1e-6` as a string (it wants `1.0e-6`) and every command-line
value arrives as a string: without this, `learning_rate: 1e-6` would reach the optimizer as
text, or a `--beta 0` override would be the truthy string "0".
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable
from functools import cache
from typing import Any, Union

import yaml

from gspo_trl.errors import FieldTypeError

_NONE_WORDS = {"none", "null", "~", ""}
_TRUE_WORDS = {"true", "yes", "on", "1"}
_FALSE_WORDS = {"false", "no", "off", "0"}


@cache
def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved type annotation of a dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _coerce_scalar(value: str, target: Any, prefer_string: bool = False) -> Any:
    lowered = value.strip().lower()
    if target is type(None):
        if lowered in _NONE_WORDS - ({"none", ""} if prefer_string else set()):
            return None
        raise FieldTypeError
    if target is bool:
        if lowered in _TRUE_WORDS:
            return True
        if lowered in _FALSE_WORDS:
            return False
        raise FieldTypeError
    if target is int:
        return int(value)
    if target is float:
        return float(value)
    if target is str:
        return value
    raise FieldTypeError


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """Return `value` as `annotation` (a field's type); raise FieldTypeError naming `where`.

    Strings are converted to bool/int/float/None as the annotation allows (members of a union
    are tried in the order None, bool, int, float, str). Where a string is also allowed, only
    `null` and `~` mean None: TRL gives "none" a meaning of its own (`report_to: none`).
    Non-string values are checked by kind: an int is accepted where a float is declared, a
    list where a list or tuple is, a mapping where a dict is; a number where only text is
    declared is refused (YAML reads `123` as a number, so it must be quoted).
    """
    members = _union_members(annotation)
    if Any in members or annotation is Any:
        return value
    if isinstance(value, str):
        ordered = sorted(
            members,
            key=lambda t: (
                [type(None), bool, int, float, str].index(t)
                if t in (type(None), bool, int, float, str)
                else 9
            ),
        )
        for target in ordered:
            try:
                return _coerce_scalar(value, target, prefer_string=str in members)
            except (FieldTypeError, ValueError):
                continue
        names = " or ".join(getattr(t, "__name__", str(t)) for t in members)
        if _accepts(members, (list, tuple, dict)) and value.lstrip().startswith(("[", "{")):
            # a list or mapping written as text (a command line, a dict of overrides): read it
            # as YAML and check it like any other value, never hand the text on as a list
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError as error:
                raise FieldTypeError(f"{where}: expected {names}, got {value!r} ({error})") from None
            return coerce(parsed, annotation, where)
        raise FieldTypeError(f"{where}: expected {names}, got {value!r}")
    if value is None:
        if type(None) in members:
            return None
        raise FieldTypeError(f"{where}: may not be null")
    if isinstance(value, bool) and bool not in members:
        if str in members or any(isinstance(t, type) and issubclass(t, str) for t in members):
            raise FieldTypeError(
                f"{where}: got the boolean {value!r}; YAML reads unquoted no/off/yes/on as booleans, "
                'so quote the word (e.g. save_strategy: "no")'
            )
        if int in members or float in members:
            raise FieldTypeError(f"{where}: expected a number, got {value!r}")
    _check_container_kind(value, members, where)
    if isinstance(value, int) and float in members and int not in members:
        return float(value)
    return value


def _accepts(members: tuple[Any, ...], kinds: tuple[type, ...]) -> bool:
    return any(t in kinds or typing.get_origin(t) in kinds for t in members)


def _check_container_kind(value: Any, members: tuple[Any, ...], where: str) -> None:
    """Refuse a list where a mapping is declared (and so on), and a number where only text is."""
    names = " or ".join(getattr(t, "__name__", str(t)) for t in members)
    if isinstance(value, list | tuple) and not _accepts(members, (list, tuple)):
        raise FieldTypeError(f"{where}: expected {names}, got a list {value!r}")
    if isinstance(value, dict) and not _accepts(members, (dict,)):
        raise FieldTypeError(f"{where}: expected {names}, got a mapping {value!r}")
    scalar_targets = {int, float, bool}
    if isinstance(value, int | float) and not (scalar_targets & set(members)) and str in members:
        raise FieldTypeError(f"{where}: expected text, got the number {value!r}; quote it in YAML")


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest candidate, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def build_dataclass(cls: type, values: dict[str, Any], where: str) -> Any:
    """Instantiate dataclass `cls` from `values`, refusing unknown keys and coercing types."""
    types_by_name = field_types(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in types_by_name:
            raise FieldTypeError(f"{where}.{key}: unknown key{did_you_mean(key, types_by_name)}")
        kwargs[key] = coerce(value, types_by_name[key], f"{where}.{key}")
    return cls(**kwargs)
