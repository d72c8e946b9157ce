"""Reward parameters: what a recipe may set, with the type each one declares.

A parameter's type is its annotation in the reward's signature, resolved (rewards written
with `from __future__ import annotations` have text annotations). Values are converted with
gspo_trl.core.coercion.coerce, the same coercion recipe fields and command-line overrides get, so
`--rewards.1.max_completion_len 4096` is the int 4096 and `max_len: 1.5` is refused.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gspo_trl.core.coercion import coerce, type_name
from gspo_trl.core.errors import RewardParameterError, ValueTypeError


class _Required:
    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class RewardParam:
    """One parameter a recipe may set, e.g. ``max_len`` of ``cosine`` (``default`` may be REQUIRED).

    ``type`` is the resolved annotation (Any when there is none or it cannot be resolved);
    ``annotation`` is its readable name, for listings.
    """

    name: str
    default: Any
    annotation: str
    type: Any = Any

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def parameter_types(target: Callable[..., Any]) -> dict[str, Any]:
    """Parameter name -> resolved annotation of `target` (a function, or a class's __init__).

    A text annotation that cannot be evaluated (a name imported only under TYPE_CHECKING)
    becomes Any: its values are then handed to the reward unchecked, as before.
    """
    if inspect.isclass(target):
        function = target.__init__
    elif inspect.isfunction(target) or inspect.ismethod(target):
        function = target
    else:
        function = getattr(type(target), "__call__", target)  # noqa: B004 - a callable object
    function = inspect.unwrap(function)
    try:
        return dict(typing.get_type_hints(function))
    except Exception:  # any failure to evaluate: fall back per parameter
        pass
    found = {}
    namespace = getattr(function, "__globals__", {})
    for name, annotation in getattr(function, "__annotations__", {}).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # the reward's own annotation text
            except Exception:
                annotation = Any
        found[name] = annotation
    return found


def describe_type(annotation: Any) -> str:
    """The readable name of a parameter's type ('' when it declares none)."""
    return "" if annotation is Any else type_name(annotation)


def coerce_param(reward: str, param: RewardParam, value: Any) -> Any:
    """`value` as `param`'s declared type; RewardParameterError naming reward and parameter."""
    try:
        return coerce(value, param.type, f"reward {reward!r}: parameter {param.name!r}")
    except ValueTypeError as error:
        raise RewardParameterError(str(error)) from None
