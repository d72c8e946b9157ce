"""Mixtral's router: softmax in float32, top-k, always renormalised, left in float32.

MixtralTopKRouter's forward (transformers/models/mixtral/modeling_mixtral.py:104-111):

    router_logits = F.linear(hidden_states, self.weight)  # (seq_len, num_experts)
    router_probs = torch.nn.functional.softmax(router_logits.float(), dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)  # (seq_len, top_k)
    router_top_value /= router_top_value.sum(dim=-1, keepdim=True)

Mixtral's sparse block multiplies its input by uniform noise in training when
`router_jitter_noise > 0` (`if self.training and self.jitter_noise > 0:`, modeling_mixtral.py:126-127):
routing then differs between any two forwards, which is what replay removes.
"""

from __future__ import annotations

import torch
from torch import nn

from gspo_trl.model.routing.family import RouterFamily


def renormalised_scores_at(router: nn.Module, logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(logits.float(), dim=-1)
    scores = probs.gather(-1, indices)
    return scores / scores.sum(dim=-1, keepdim=True)


FAMILY = RouterFamily(name="mixtral", router_classes=("MixtralTopKRouter",), scores_at=renormalised_scores_at)
