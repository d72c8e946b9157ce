"""engine.correction's arithmetic: one length-normalised weight per response, pure functions.

vLLM samples with other kernels (often another precision) than the trainer, so the policy mu that
drew the tokens is not pi_old. With d_t = log pi_old(y_t) - log mu(y_t) on a response's scored
tokens the weight is w_i = exp(mean_t d_t), length-normalised like s_i, so a constant gap gives
every response the same weight; TRL 1.16's sequence modes use exp(SUM_t d_t), which zeroes long
responses first (`trl_sequence_log_weight` keeps that rule for side-by-side figures).

Modes (`correction_weights`): `truncate` (min(w_i, C)), `reject` (w_i inside [C_min, C_max], 0
outside), and two token rules from verl and AReaL: a response's largest |d_t|, and its mean
K3 = exp(d_t) - 1 - d_t. `auto_thresholds` sets bounds from a measured mismatch.
gspo_trl.training.probes.correction applies the weight in the loss; this module has no trainer
state. Why and how measured: docs/engine-logprobs.md ("Correcting the mismatch").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections.engine_correction import CORRECTION_MODES
from gspo_trl.training.ratio_stats import bucket_labels

AUTO_MARGIN = 2.0
"""`auto` thresholds: this many times the 99th percentile of each statistic on the calibrating
rollout batch. At most ~1% of that batch lies past its own 99th percentile, and twice that far
only a response the calibrating noise could not produce: the rules then catch outliers (drift, a
changed kernel, a stale engine), not the ordinary engine noise they were measured on."""
AUTO_FLOOR = {"log_weight": 1e-3, "max_token": 0.05, "k3": 1e-4}
"""Smallest `auto` threshold per statistic (nats, nats, nats): an engine that matches the
trainer to ~1e-7 would otherwise give bounds a rounding change could cross. 1e-3 nats moves a
weight by 0.1%, a token log-prob of 0.05 nats is 5% in probability, and K3 = 1e-4 is a
per-token gap of ~0.014 nats: all too small to matter to a gradient."""


@dataclass(frozen=True)
class ResponseDivergence:
    """Per-response statistics of d_t = log pi_old - log mu over the scored tokens (shape (B,)).

    log_weight: mean_t d_t (nats), log w_i. max_token: max_t |d_t| (nats). k3: mean_t
    (exp(d_t) - 1 - d_t) (nats, >= 0). lengths: scored tokens. A response with no scored
    token has 0 everywhere (weight 1, never rejected).
    """

    log_weight: torch.Tensor
    max_token: torch.Tensor
    k3: torch.Tensor
    lengths: torch.Tensor


@dataclass(frozen=True)
class Thresholds:
    """The bounds a correction applies; None switches a bound off.

    weight_max: C (truncate) or C_max (reject), a weight (> 1 means pi_old likes the response more
    than the engine did). weight_min: C_min (reject only). reject_max_token: bound on max_t |d_t|
    (nats). reject_k3: bound on mean_t K3 (nats). how: where the values came from, for the banner.
    The names are the `engine:` keys'.
    """

    weight_max: float | None = None
    weight_min: float | None = None
    reject_max_token: float | None = None
    reject_k3: float | None = None
    how: str = "set in the recipe"

    def describe(self) -> str:
        def fmt(value: float | None) -> str:
            return "off" if value is None else f"{value:.6g}"

        return (
            f"weight in [{fmt(self.weight_min)}, {fmt(self.weight_max)}], max token |d| "
            f"{fmt(self.reject_max_token)} nats, mean K3 {fmt(self.reject_k3)} ({self.how})"
        )


@dataclass(frozen=True)
class CorrectionWeights:
    """The correction of one batch of responses (shape (B,)): weight, and why it differs from w_i."""

    weight: torch.Tensor
    """What multiplies the response's loss: w_i, min(w_i, C) or 0 (float64)."""
    truncated: torch.Tensor
    """Bool: w_i was above C and was cut to C (truncate mode)."""
    rejected: torch.Tensor
    """Bool: the response's weight is 0 (outside [C_min, C_max], or a token rule)."""


def token_log_ratio(log_pi_old: torch.Tensor, log_mu: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """d_t = log pi_old - log mu on scored tokens, 0 elsewhere (B, T), float64.

    A token the engine could not score (NaN) counts as d_t = 0, as TRL does
    (`torch.nan_to_num(per_token_logps_diff, nan=0.0)`, trl/trainer/grpo_trainer.py:2665)."""
    d = (log_pi_old.double() - log_mu.double()) * mask.double()
    return torch.nan_to_num(d, nan=0.0)


def response_divergence(
    log_pi_old: torch.Tensor, log_mu: torch.Tensor, mask: torch.Tensor
) -> ResponseDivergence:
    """The per-response statistics the correction and its `auto` thresholds read."""
    d = token_log_ratio(log_pi_old, log_mu, mask)
    scored = mask.double()
    lengths = scored.sum(-1)
    count = lengths.clamp(min=1.0)
    k3 = (torch.expm1(d) - d) * scored
    return ResponseDivergence(
        log_weight=d.sum(-1) / count,
        max_token=d.abs().amax(-1) if d.shape[-1] else torch.zeros_like(lengths),
        k3=k3.sum(-1) / count,
        lengths=lengths,
    )


def trl_sequence_log_weight(
    log_pi_old: torch.Tensor, log_mu: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """TRL's sequence-mode log weight, SUM_t d_t (trl/trainer/grpo_trainer.py:2668), for comparison only."""
    return token_log_ratio(log_pi_old, log_mu, mask).sum(-1)


def trl_sequence_weight(
    log_weight_sum: torch.Tensor, mode: str, clip_max: float, clip_min: float | None
) -> torch.Tensor:
    """TRL's `sequence_truncate` / `sequence_mask` weight from SUM_t d_t
    (trl/trainer/grpo_trainer.py:2674-2703): truncate clamps exp(sum) to [clip_min, clip_max]; mask
    sets it to 0 outside that range."""
    ratio = torch.exp(log_weight_sum.double())
    if mode == "sequence_truncate":
        return ratio.clamp(min=clip_min, max=clip_max)
    if mode != "sequence_mask":
        raise ValueError(f"mode must be sequence_truncate or sequence_mask, got {mode!r}")
    low = -math.inf if clip_min is None else clip_min
    return ratio.masked_fill((ratio < low) | (ratio > clip_max), 0.0)


def correction_weights(
    divergence: ResponseDivergence, mode: str, thresholds: Thresholds
) -> CorrectionWeights:
    """Each response's loss weight under `mode` (truncate | reject) and `thresholds`.

    truncate: min(w_i, weight_max). reject: w_i inside [weight_min, weight_max], 0 outside. In both
    modes the token rules, when set, reject (weight 0):

    - reject_max_token: max_t |d_t| above the bound (verl `seq_max_k2`, `seq_stat =
      _sequence_max(token_k2)` with `token_k2 = 0.5 * log_ratio_safe**2`,
      verl/trainer/ppo/rollout_corr_helper.py:363,264 at verl-project/verl@1dda039; AReaL
      `agg="max"`, `seq_agg = agg_for_max.max(dim=-1, keepdim=True)[0]`,
      areal/utils/functional/functional.py:365 at inclusionAI/AReaL@4aef98d).
      |d| <= b is verl's 0.5 d^2 <= b^2 / 2; nats read more easily.
    - reject_k3: mean_t (exp(d_t) - 1 - d_t) above the bound (verl `seq_mean_k3`, `token_k3 =
      torch.exp(log_ratio_safe) - 1.0 - log_ratio_safe`, rollout_corr_helper.py:265,354; its preset
      bound `rs_threshold: float = 0.01`, verl/trainer/config/algorithm.py:329 at
      verl-project/verl@1dda039). With tokens drawn from mu and r = pi_old / mu,
      E_mu[r - 1 - log r] = KL(mu || pi_old) >= 0. AReaL's `kl_k3` negates the log-ratio first
      (`log_ratio = -log_ratio`, areal/utils/data.py:1651 at inclusionAI/AReaL@4aef98d), so its
      K3 is r' - 1 - log r' with r' = mu / pi: the other direction; this follows verl.
    """
    if mode not in CORRECTION_MODES[1:]:
        raise ValueError(f"mode must be truncate or reject, got {mode!r}")
    w = torch.exp(divergence.log_weight.double())
    rejected = torch.zeros_like(w, dtype=torch.bool)
    truncated = torch.zeros_like(rejected)
    if mode == "truncate" and thresholds.weight_max is not None:
        truncated = w > thresholds.weight_max
        w = w.clamp(max=thresholds.weight_max)
    elif mode == "reject":
        if thresholds.weight_max is not None:
            rejected |= w > thresholds.weight_max
        if thresholds.weight_min is not None:
            rejected |= w < thresholds.weight_min
    if thresholds.reject_max_token is not None:
        rejected |= divergence.max_token > thresholds.reject_max_token
    if thresholds.reject_k3 is not None:
        rejected |= divergence.k3 > thresholds.reject_k3
    truncated &= ~rejected
    return CorrectionWeights(w.masked_fill(rejected, 0.0), truncated, rejected)


def divergence_percentiles(divergence: ResponseDivergence) -> dict[str, float]:
    """The 99th percentile of |log w_i|, max-token |d| and mean K3 over responses with a scored
    token (nats): what `auto` thresholds are made of, and what `check-logprobs --json` saves."""
    scored = divergence.lengths > 0

    def q99(values: torch.Tensor) -> float:
        values = values[scored].double()
        return torch.quantile(values, 0.99).item() if values.numel() else 0.0

    return {
        "log_weight_abs": q99(divergence.log_weight.abs()),
        "max_token": q99(divergence.max_token),
        "k3": q99(divergence.k3),
        "responses": float(int(scored.sum())),
    }


def auto_thresholds(
    percentiles: dict[str, float], wanted: set[str], margin: float = AUTO_MARGIN
) -> dict[str, float]:
    """`auto` values for the `engine:` keys in `wanted` (weight_max, weight_min, reject_max_token,
    reject_k3): `margin` x the statistic's 99th percentile, floored at AUTO_FLOOR. The weight
    bounds are symmetric in log space, [exp(-a), exp(a)], a from |log w_i|."""
    a = max(margin * percentiles["log_weight_abs"], AUTO_FLOOR["log_weight"])
    values = {
        "weight_max": math.exp(a),
        "weight_min": math.exp(-a),
        "reject_max_token": max(margin * percentiles["max_token"], AUTO_FLOOR["max_token"]),
        "reject_k3": max(margin * percentiles["k3"], AUTO_FLOOR["k3"]),
    }
    return {key: values[key] for key in wanted}


def divergence_from_sequences(
    log_pi_old: list[torch.Tensor], log_mu: list[torch.Tensor]
) -> ResponseDivergence:
    """`response_divergence` of unpadded per-response log-prob lists (check-logprobs' pairs)."""
    width = max((t.numel() for t in log_pi_old), default=0)
    old = torch.zeros(len(log_pi_old), width, dtype=torch.float64)
    mu = torch.zeros_like(old)
    mask = torch.zeros_like(old)
    for row, (t, e) in enumerate(zip(log_pi_old, log_mu, strict=True)):
        old[row, : t.numel()] = t.double()
        mu[row, : e.numel()] = e.double()
        mask[row, : t.numel()] = 1.0
    return response_divergence(old, mu, mask)


def summarize_weights(rows: torch.Tensor, length_buckets: tuple[int, ...]) -> dict[str, float]:
    """`gspo/behaviour/*` from rows [weight, w_i, truncated, rejected, length], one per response."""
    weight, raw, truncated, rejected, lengths = rows.double().unbind(1)
    out = {
        names.CORRECTION_WEIGHT_MEAN: weight.mean().item(),
        names.CORRECTION_WEIGHT_P1: torch.quantile(raw, 0.01).item(),
        names.CORRECTION_WEIGHT_P99: torch.quantile(raw, 0.99).item(),
        names.CORRECTION_TRUNCATED: truncated.mean().item(),
        names.CORRECTION_REJECTED: rejected.mean().item(),
    }
    edges = [0, *length_buckets, float("inf")]
    for label, low, high in zip(bucket_labels(length_buckets), edges[:-1], edges[1:], strict=True):
        in_bucket = (lengths >= low) & (lengths < high)
        if in_bucket.any():
            for share, flags in (
                (names.CORRECTION_TRUNCATED, truncated),
                (names.CORRECTION_REJECTED, rejected),
            ):
                out[names.correction_by_length(share, label)] = flags[in_bucket].mean().item()
    return out
