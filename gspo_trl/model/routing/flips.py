"""Flip statistics of mixture-of-experts routing: how often the router's top-k set differs from a
reference routing (pi_old's, or the engine's), per layer, per response and over a log interval.

`hooks.RoutingHooks` marks each flipped (row, layer, position); this module counts those marks at
the positions that score a response token and turns them into the logged rates (0-1):
gspo/mb{k}/routing/*, gspo/engine_routing/* and gspo/routing_replay/replayed_updates. Pure: no
model, no trainer state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

import gspo_trl.core.metric_names as names


@dataclass
class FlipCounts:
    """Flips summed over the updates of one minibatch index since the last log, all ranks."""

    layer_flips: torch.Tensor | None = None
    """(layers,) flipped (response token, layer) pairs per layer."""
    tokens: float = 0.0
    response_rates: list[torch.Tensor] = field(default_factory=list)

    def add(self, layer_flips: torch.Tensor, tokens: float, response_rates: torch.Tensor) -> None:
        self.layer_flips = layer_flips if self.layer_flips is None else self.layer_flips + layer_flips
        self.tokens += tokens
        self.response_rates.append(response_rates)

    def stats(self) -> dict[str, float]:
        """routing/flip_rate, /flip_rate_layer_max and /flip_rate_response_max (0-1); empty
        when no response token was seen."""
        if self.layer_flips is None or self.tokens <= 0:
            return {}
        per_layer = self.layer_flips / self.tokens
        rates = torch.cat(self.response_rates)
        rates = rates[~rates.isnan()]
        out = {names.FLIP_RATE: float(per_layer.mean()), names.FLIP_RATE_LAYER_MAX: float(per_layer.max())}
        if rates.numel():
            out[names.FLIP_RATE_RESPONSE_MAX] = float(rates.max())
        return out


def flip_counts(
    flips: torch.Tensor, completion_mask: torch.Tensor
) -> tuple[torch.Tensor, float, torch.Tensor]:
    """Flips of one pass at the positions that score a response token: per layer (layers,), the
    token count, and each response's rate (B,) (NaN for a response without tokens).

    `flips` is (B, layers, P + C) over TRL's `input_ids = torch.cat([prompt_ids, completion_ids], dim=1)`
    (trl/trainer/grpo_trainer.py:3024), the mask (B, C). Response token j's log-prob is read at position P - 1
    + j (the last prompt token for j = 0), so those positions count, and the last response token's own
    position, which scores nothing (and has no engine routing), does not."""
    mask = completion_mask.float()
    width = mask.shape[1]
    flipped = flips[:, :, -width - 1 : -1].float() * mask[:, None, :]
    tokens = mask.sum(dim=1)
    layers = flips.shape[1]
    rates = flipped.sum(dim=(1, 2)) / (tokens * layers)
    return flipped.sum(dim=(0, 2)), float(tokens.sum()), rates.masked_fill(tokens == 0, float("nan"))


def engine_routing_metrics(counts: FlipCounts) -> dict[str, float]:
    """gspo/engine_routing/*: the trainer's router against the engine's routing in pi_old's forward."""
    stats = counts.stats()
    if not stats:
        return {}
    return {
        names.ENGINE_ROUTING_FLIP_RATE: stats[names.FLIP_RATE],
        names.ENGINE_ROUTING_FLIP_RATE_LAYER_MAX: stats[names.FLIP_RATE_LAYER_MAX],
    }


def replay_metrics(replayed: int, updates: int) -> dict[str, float]:
    """gspo/routing_replay/replayed_updates: `replayed` of `updates` update passes ran on recorded
    experts (empty without updates)."""
    return {names.ROUTING_REPLAYED: replayed / updates} if updates else {}
