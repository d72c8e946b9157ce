"""Reference GSPO, GSPO-token and GRPO losses in plain torch, written from the formulas.

Used only by tests (to cross-check TRL's loss, which GSPOTrainer trains with) and by the
benchmark scripts. Written from the GSPO paper (docs/gspo.md), not from TRL, so that a change in TRL's loss
shows up as a disagreement. All functions return the loss to MINIMISE (= -J) and take:

    logp, old_logp: (B, T) token log-probs under the new / old policy (nats)
    advantages:     (B,) one per response, or (B, T) per token (GSPO-token only)
    mask:           (B, T) 1 for completion tokens, 0 for padding
    eps_low, eps_high: the clip range [1 - eps_low, 1 + eps_high]

Aggregation is TRL's `loss_type="grpo"`: mean over a response's tokens, then over responses.
"""

from __future__ import annotations

import torch


def _token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-response mean over unmasked tokens, shape (B,)."""
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = (1/|y_i|) sum_t (logp_it - old_logp_it), shape (B,), nats per token."""
    return _token_mean(logp - old_logp, mask)


def _clipped_objective(
    ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float
) -> torch.Tensor:
    """PPO's pessimistic term min(r A, clip(r, 1-eps_low, 1+eps_high) A), elementwise."""
    return torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)


def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
) -> torch.Tensor:
    """-J_GSPO = -mean_i min(s_i A_i, clip(s_i) A_i), one clip decision per response."""
    s = torch.exp(sequence_log_ratio(logp, old_logp, mask))
    return -_clipped_objective(s, advantages, eps_low, eps_high).mean()


def gspo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
) -> torch.Tensor:
    """-J_GSPO-token with s_it = exp(sg[log s_i] + logp_it - sg[logp_it]) and per-token A_it.

    s_it has the value of s_i (same clip decision for every token of a response); its
    gradient flows through logp_it alone, weighted by that token's advantage.
    """
    log_s = sequence_log_ratio(logp, old_logp, mask).detach()
    s_tok = torch.exp(log_s.unsqueeze(-1) + logp - logp.detach())
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1).expand_as(logp)
    return -_token_mean(_clipped_objective(s_tok, adv, eps_low, eps_high), mask).mean()


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> torch.Tensor:
    """-J_GRPO: per-token ratio w_it and clip inside the token mean (beta = 0)."""
    w = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    return -_token_mean(_clipped_objective(w, adv, eps_low, eps_high), mask).mean()


def gspo_clipped(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
) -> torch.Tensor:
    """(B,) bool: the clip is active for response i (its whole gradient is dropped)."""
    s = torch.exp(sequence_log_ratio(logp, old_logp, mask))
    return ((s > 1 + eps_high) & (advantages > 0)) | ((s < 1 - eps_low) & (advantages < 0))


LOSSES = {"gspo": gspo_loss, "gspo_token": gspo_token_loss, "grpo": grpo_loss}
"""Reference losses by name, for table-driven tests and benchmarks."""
