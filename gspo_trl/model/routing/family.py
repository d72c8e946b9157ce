"""A model family's router: which classes are routers, and how it turns logits into gate weights.

transformers 5 gives every mixture-of-experts family a router module whose forward returns
`(router_logits, router_scores, router_indices)`: logits over all experts (tokens, E), the gate
weights of the chosen experts (tokens, k) and their indices (tokens, k); the sparse block feeds
the last two to its experts (`return router_logits, router_scores, router_indices`,
`_, routing_weights, selected_experts = self.gate(hidden_states_reshaped)`,
transformers/models/qwen3_moe/modeling_qwen3_moe.py:258-281). Replaying a routing
replaces the indices and recomputes the gate weights *at those experts* from the current logits,
so the router keeps its gradient. That recomputation is the one thing that differs by family: it
is a family's `scores_at`, written beside the transformers lines it mirrors, one file a family
(gspo_trl.model.routing.qwen3_moe, .mixtral), listed in gspo_trl.model.routing.families.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

ScoresAt = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
"""(router module, router logits (N, E), expert indices (N, k) int64) -> gate weights (N, k)."""


@dataclass(frozen=True)
class RouterFamily:
    """One model family's router: the class names that are its routers, and its gate weights."""

    name: str
    router_classes: tuple[str, ...]
    scores_at: ScoresAt
