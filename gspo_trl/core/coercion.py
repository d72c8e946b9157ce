"""Read a user value (YAML or command-line text) as the type an annotation declares.

The one coercion of the package: recipe fields (their dataclass annotations), reward
parameters (the reward's signature) and command-line overrides all go through `coerce`.
YAML 1.1 reads `1e-6` as text and every override arrives as text, so `--beta 0` must become
0.0 (not the truthy "0") and `--rewards.1.max_completion_len 4096` the int 4096.

It lives in the reward library because that is the lowest layer (tests/test_architecture.py):
gspo_trl.rewards imports no other room of gspo_trl, and both the rewards and the recipe layer
need it. It imports only the standard library and PyYAML.
"""

from __future__ import annotations

import enum
import inspect
import math
import os
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

import yaml

from gspo_trl.core.errors import ValueTypeError

_NONE_WORDS = {"null", "~", "none", ""}
_TRUE_WORDS = {"true", "yes", "on", "1"}
_FALSE_WORDS = {"false", "no", "off", "0"}
_SCALAR_ORDER = (type(None), bool, int, float, str)
"""Text is tried against a union's members in this order: `--max_steps 7` is the int 7 for
`int | float`, `--report_to none` stays text for `str | None` (see `_text_as`)."""


class _NoMatch(Exception):
    """Internal: one member of a union does not accept the value; the next is tried."""


def type_name(annotation: Any) -> str:
    """A short, readable name for an annotation: 'int', 'int or None', 'list[str]', "'a' or 'b'"."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return "any value"
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(member) for member in typing.get_args(annotation))
    if origin is Literal:
        return " or ".join(repr(value) for value in typing.get_args(annotation))
    if annotation is type(None):
        return "None"
    if origin is not None:
        args = ", ".join("..." if a is Ellipsis else type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return tuple(m for member in typing.get_args(annotation) for m in _members(member))
    return (annotation,)


def _rank(member: Any) -> int:
    return _SCALAR_ORDER.index(member) if member in _SCALAR_ORDER else len(_SCALAR_ORDER)


def _is_container(member: Any) -> bool:
    origin = typing.get_origin(member) or member
    return (
        isinstance(origin, type)
        and issubclass(origin, list | tuple | dict | Mapping | Sequence)
        and (origin is not str)
    )


def _text_as(text: str, member: Any, text_allowed: bool) -> Any:
    """`text` as the scalar `member`, or _NoMatch. Where text itself is allowed too, only
    `null`/`~` mean None: TRL gives "none" a meaning of its own (`report_to: none`)."""
    lowered = text.strip().lower()
    if member is type(None):
        if lowered in (_NONE_WORDS - {"none", ""} if text_allowed else _NONE_WORDS):
            return None
    elif member is bool:
        if lowered in _TRUE_WORDS | _FALSE_WORDS:
            return lowered in _TRUE_WORDS
    elif member is int:
        try:
            return int(text)
        except ValueError:
            pass
    elif member is float:
        try:
            return float(text)
        except ValueError:
            pass
    elif member is str:
        return text
    elif typing.get_origin(member) is Literal:
        for choice in typing.get_args(member):
            if isinstance(choice, str) and text == choice:
                return choice
            if not isinstance(choice, str) and choice is not None:
                try:
                    return _value_as(_text_as(text, type(choice), False), member, "")
                except (_NoMatch, ValueTypeError):
                    continue
    elif isinstance(member, type) and issubclass(member, enum.Enum):
        for choice in member:
            if text in (choice.name, str(choice.value)):
                return choice
    elif isinstance(member, type) and issubclass(member, os.PathLike):
        return member(text)
    raise _NoMatch


def _value_as(value: Any, member: Any, where: str) -> Any:
    """A non-text `value` as `member`, or _NoMatch (ValueTypeError from inside a container)."""
    origin = typing.get_origin(member)
    if member is type(None):
        if value is None:
            return None
    elif member is bool:
        if isinstance(value, bool):
            return value
    elif member is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)  # YAML `1.0e3`: an integral float is the int it names
    elif member is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif member is str:
        if isinstance(value, str):
            return value
    elif origin is Literal:
        if any(value == choice and type(value) is type(choice) for choice in typing.get_args(member)):
            return value
    elif _is_container(member):
        return _container_as(value, member, where)
    elif member is Any or not isinstance(member, type):
        return value  # Callable[...], a TypeVar, ...: nothing a YAML value can be checked against
    elif isinstance(value, member):
        return value
    raise _NoMatch


def _container_as(value: Any, member: Any, where: str) -> Any:
    origin = typing.get_origin(member) or member
    args = typing.get_args(member)
    if issubclass(origin, dict | Mapping):
        if not isinstance(value, dict):
            raise _NoMatch
        key_type, value_type = args if len(args) == 2 else (Any, Any)
        return {
            coerce(key, key_type, f"{where} key"): coerce(item, value_type, f"{where}.{key}")
            for key, item in value.items()
        }
    if not isinstance(value, list | tuple):
        raise _NoMatch
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(args) != len(value):
            raise ValueTypeError(f"{where}: expected {len(args)} items ({type_name(member)}), got {value!r}")
        pairs = enumerate(zip(value, args, strict=True))
        items = [coerce(item, arg, f"{where}[{i}]") for i, (item, arg) in pairs]
    else:
        item_type = args[0] if args else Any
        items = [coerce(item, item_type, f"{where}[{i}]") for i, item in enumerate(value)]
    return tuple(items) if origin is tuple else items


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """`value` as `annotation` declares it; raises ValueTypeError naming `where` (one line).

    Handles None, bool, int, float, str, Literal, Enum, unions/Optional, and list/tuple/dict
    with their item types. Text is converted (union members tried in the order None, bool,
    int, float, str; a list or mapping written as text is read as YAML). Other values are
    checked by kind: an int is accepted (as a float) where a float is declared and an
    integral float where an int is; a number or boolean where only text is declared is
    refused, since YAML reads `123` and `no` as such and the fix is to quote them.
    """
    if annotation is Any or annotation is inspect.Parameter.empty:
        return value
    members = sorted(_members(annotation), key=_rank)
    if Any in members:
        return value
    expected = type_name(annotation)
    if isinstance(value, str):
        text_allowed = str in members or any(typing.get_origin(m) is Literal for m in members)
        for member in members:
            if _is_container(member):
                continue
            try:
                return _text_as(value, member, text_allowed)
            except _NoMatch:
                continue
        if any(_is_container(m) for m in members) and value.lstrip().startswith(("[", "{")):
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError as error:
                problem = getattr(error, "problem", None) or str(error).splitlines()[0]
                raise ValueTypeError(f"{where}: expected {expected}, got {value!r} ({problem})") from None
            return coerce(parsed, annotation, where)
        raise ValueTypeError(f"{where}: expected {expected}, got {value!r}")
    for member in members:
        try:
            return _value_as(value, member, where)
        except _NoMatch:
            continue
    raise ValueTypeError(f"{where}: {_refusal(value, members, expected)}")


def _refusal(value: Any, members: list[Any], expected: str) -> str:
    """Why a non-text value fits no member, worded for the YAML mistake behind it."""
    texts = any(m is str or typing.get_origin(m) is Literal for m in members)
    if value is None:
        return "may not be null"
    if isinstance(value, bool) and texts:
        return (
            f"got the boolean {value!r}; YAML reads unquoted no/off/yes/on as booleans, "
            'so quote the word (e.g. save_strategy: "no")'
        )
    if isinstance(value, int | float) and not isinstance(value, bool) and texts:
        return f"expected {expected}, got the number {value!r}; quote it in YAML"
    if isinstance(value, float) and int in members and math.isfinite(value):
        return f"expected {expected}, got the non-integral number {value!r}"
    if isinstance(value, list | tuple):
        return f"expected {expected}, got a list {value!r}"
    if isinstance(value, dict):
        return f"expected {expected}, got a mapping {value!r}"
    return f"expected {expected}, got {type(value).__name__} {value!r}"
