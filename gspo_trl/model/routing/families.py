"""The router families replay knows, and the routers of a model.

A new family is one file beside this one (its `FAMILY`, see gspo_trl.model.routing.family) and
one entry in `FAMILIES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def stop_router_logits_in_generate(model: Any) -> None:
    """Turn off a mixture-of-experts config's `output_router_logits`, which TRL's SFTTrainer saves
    on (`text_config.output_router_logits = self.aux_loss_enabled`, trl/trainer/sft_trainer.py:1210):
    with it on, every forward of `generate` computes the load-balancing loss of the new token's
    router logits against the whole attention mask and fails with 'The size of tensor a (32) must
    match the size of tensor b (384)' (`flat_mask.repeat_interleave(top_k)`,
    transformers/models/qwen3_moe/modeling_qwen3_moe.py:572).
    The aux loss stays: TRL asks for router logits per call (`model_inputs["output_router_logits"]
    = True` under `compute_aux_loss`, trl/trainer/grpo_trainer.py:1492) and decides it from the
    attribute's presence, not its value (`hasattr(text_config, "output_router_logits")`,
    grpo_trainer.py:832)."""
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text_config, "output_router_logits", False):
        text_config.output_router_logits = False
