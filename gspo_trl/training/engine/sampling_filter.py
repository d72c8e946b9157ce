"""vLLM's top-k/top-p/min-p filter, replayed on the trainer's logits: pure functions, no trainer state.

A reshaping sampler reports the sampled token's log-prob over the kept set K_t; the trainer's is
over the whole vocabulary, so they differ by log S_t, the log of the mass kept.
`log_kept_mass` computes log S_t from the trainer's logits with vLLM 0.31's CPU sampler's
operations, in its order and precision (fp32): temperature, min-p, then top-k and top-p on the
ascending sort. The sampled token always counts as kept; `sampled_outside` counts the tokens the
trainer's logits would have dropped, the one way replay can be inexact.
Used by gspo_trl.training.probes.sampling_masks. The vLLM lines each step follows are quoted in
docs/engine-logprobs.md ("Top-p, top-k and min-p").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from gspo_trl.config.sections.engine_sampler import sampler_settings


@dataclass(frozen=True)
class SamplerFilter:
    """The filter vLLM applies after temperature; the neutral values leave it off."""

    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @classmethod
    def from_settings(cls, training: Mapping[str, Any]) -> SamplerFilter:
        """From GRPOConfig fields (`generation_kwargs` overriding them, as vLLM gets them)."""
        settings = sampler_settings(training)
        top_k = settings["top_k"]
        return cls(
            top_k=int(top_k) if top_k and top_k > 0 else 0,
            top_p=1.0 if settings["top_p"] is None else float(settings["top_p"]),
            min_p=float(settings["min_p"] or 0.0),
        )

    @property
    def active(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0


def kept_mask(scaled: torch.Tensor, sampler: SamplerFilter) -> torch.Tensor:
    """Bool (N, V): the tokens vLLM's filter keeps for each row of `scaled` (logits / temperature)."""
    logits = scaled.float().clone()
    vocab = logits.shape[-1]
    if sampler.min_p > 0.0:
        probs = torch.softmax(logits, dim=-1)
        threshold = probs.amax(dim=-1, keepdim=True) * sampler.min_p
        logits.masked_fill_(probs < threshold, -float("inf"))
    top_k = sampler.top_k if 0 < sampler.top_k < vocab else 0
    if top_k or sampler.top_p < 1.0:
        ordered, index = logits.sort(dim=-1, descending=False)
        if top_k:
            kth = ordered[:, vocab - top_k].unsqueeze(1)
            ordered.masked_fill_(ordered < kth, -float("inf"))
        if sampler.top_p < 1.0:
            cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
            drop = cumulative <= 1 - sampler.top_p
            drop[:, -1] = False
            ordered.masked_fill_(drop, -float("inf"))
        logits = logits.scatter(-1, index, ordered)
    return logits > -float("inf")


@dataclass(frozen=True)
class KeptMass:
    """Per token (N,): log S_t (nats, <= 0), and whether the sampled token fell outside the
    trainer's kept set (added back to it)."""

    log_mass: torch.Tensor
    sampled_outside: torch.Tensor


def log_kept_mass(scaled: torch.Tensor, sampled: torch.Tensor, sampler: SamplerFilter) -> KeptMass:
    """log S_t for rows of `scaled` (N, V: logits / temperature) and the tokens sampled there (N,),
    in fp32 as vLLM; the sampled token always counts as kept."""
    scaled = scaled.float()
    kept = kept_mask(scaled, sampler)
    rows = torch.arange(scaled.shape[0], device=scaled.device)
    outside = ~kept[rows, sampled]
    kept[rows, sampled] = True
    log_mass = torch.logsumexp(scaled.masked_fill(~kept, -float("inf")), dim=-1) - torch.logsumexp(
        scaled, dim=-1
    )
    return KeptMass(log_mass.clamp(max=0.0), outside)
