"""The router families replay knows, and the routers of a model.

A new family is one file beside this one (its `FAMILY`, see gspo_trl.model.routing.family) and
one entry in `FAMILIES`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from gspo_trl.model.routing.family import RouterFamily
from gspo_trl.model.routing.mixtral import FAMILY as MIXTRAL
from gspo_trl.model.routing.qwen3_moe import FAMILY as QWEN3_MOE

FAMILIES: tuple[RouterFamily, ...] = (QWEN3_MOE, MIXTRAL)


@dataclass(frozen=True)
class RouterSite:
    """One router of a model: its MoE layer's position among the model's routers (0-based,
    in module order, which is layer order) and its module path."""

    layer: int
    path: str
    module: nn.Module
    family: RouterFamily


def supported_routers() -> list[str]:
    """Every router class name replay knows, for messages."""
    return [name for family in FAMILIES for name in family.router_classes]


def family_of(module: nn.Module) -> RouterFamily | None:
    """The family whose router `module` is, by class name."""
    name = type(module).__name__
    return next((f for f in FAMILIES if name in f.router_classes), None)


def find_routers(model: nn.Module) -> list[RouterSite]:
    """Every router in `model`, in module order; empty for a dense model or an unknown family."""
    sites = []
    for path, module in model.named_modules():
        family = family_of(module)
        if family is not None:
            sites.append(RouterSite(len(sites), path, module, family))
    return sites
