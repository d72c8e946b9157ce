"""Qwen3-MoE's router, which Qwen2-MoE and OLMoE share line for line.

Qwen3MoeTopKRouter's forward (transformers/models/qwen3_moe/modeling_qwen3_moe.py:258-267):

    router_logits = F.linear(hidden_states, self.weight)  # (seq_len, num_experts)
    router_probs = torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)  # (seq_len, top_k)
    if self.norm_topk_prob:
        router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
    router_top_value = router_top_value.to(router_logits.dtype)

`Qwen2MoeTopKRouter` (transformers/models/qwen2_moe/modeling_qwen2_moe.py:327-336) and
`OlmoeTopKRouter` (transformers/models/olmoe/modeling_olmoe.py:337-346) have the same body.
"""

from __future__ import annotations

import torch
from torch import nn

from gspo_trl.model.routing.family import RouterFamily


def softmax_scores_at(router: nn.Module, logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The softmax probabilities of `indices`, renormalised over them when the router does."""
    probs = torch.softmax(logits, dtype=torch.float, dim=-1)
    scores = probs.gather(-1, indices)
    if router.norm_topk_prob:
        scores = scores / scores.sum(dim=-1, keepdim=True)
    return scores.to(logits.dtype)


FAMILY = RouterFamily(
    name="qwen3_moe",
    router_classes=("Qwen3MoeTopKRouter", "Qwen2MoeTopKRouter", "OlmoeTopKRouter"),
    scores_at=softmax_scores_at,
)
