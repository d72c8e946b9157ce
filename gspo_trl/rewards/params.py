"""Reward parameters: what a recipe may set, and the cheap type check the validator runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gspo_trl.rewards.errors import RewardParameterError


class _Required:
    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class RewardParam:
    """One parameter a recipe may set, e.g. ``max_len`` of ``cosine`` (``default`` may be REQUIRED)."""

    name: str
    default: Any
    annotation: str

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


_SIMPLE_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
}


def check_type(reward: str, param: RewardParam, value: Any) -> None:
    """Reject a value whose type cannot match a simple annotation (int, float, bool, str).

    Recipes come from YAML, where ``max_len: 1e3`` is a float and ``max_len: "1024"`` a
    string: catching those at validation beats a TypeError in the middle of training.
    Other annotations are not checked here; the reward's own constructor checks values.
    """
    annotation = param.annotation.replace(" ", "")
    optional = annotation.endswith("|None") or annotation.startswith("Optional[")
    base = annotation.removesuffix("|None").removeprefix("Optional[").removesuffix("]")
    base = base.removeprefix("<class'").removesuffix("'>")
    allowed = _SIMPLE_TYPES.get(base)
    if allowed is None or (value is None and optional):
        return
    if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
        got = f"{type(value).__name__} {value!r}"
        raise RewardParameterError(f"reward {reward!r}: parameter {param.name!r} must be {base}, got {got}")
