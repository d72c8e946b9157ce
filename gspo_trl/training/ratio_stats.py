"""GSPO diagnostics' numbers: pure statistics over log s_i (DiagnosticsProbe logs them, and raises
the clip-rate alarm; `gspo-trl calibrate` and `check-logprobs` share them).

GSPO clips whole responses on the sequence ratio s_i = exp(mean_t log(pi_new / pi_old)).
What goes wrong in practice (docs/gspo.md, "What to watch") is visible only in the
distribution of log s_i on the off-policy minibatches, so `GSPOTrainer` records one row per
response per update (the fields of `RESPONSE_FIELDS`), gathers rows across ranks, and at every
logging step turns them into the metrics below with the functions of this module.

The metrics are logged through the normal Trainer path (trackio / wandb / tensorboard and
`trainer_state.json` see them). gspo_trl.core.metric_names spells every key; docs/gspo.md ("The
diagnostics") says what each means, its unit and range, and when to worry. `mb{k}` is the
update index within a rollout batch: mb1 is on-policy, `offpolicy` pools mb2..mbK.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import gspo_trl.core.metric_names as names

logger = logging.getLogger(__name__)


def sequence_log_ratio(
    per_token_logps: torch.Tensor, old_per_token_logps: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """log s_i, shape (B,): masked mean of token log-ratios, the exact expression TRL uses."""
    log_ratio = per_token_logps - old_per_token_logps
    return (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


@dataclass(frozen=True)
class PolicyPass:
    """What the loss's policy forward pass leaves for the diagnostics (B responses, T tokens)."""

    log_s: torch.Tensor
    """(B,) log s_i, from `sequence_log_ratio`."""
    scored_mask: torch.Tensor
    """(B, T) the tokens in the loss: completion mask times tool mask."""
    completion_mask: torch.Tensor
    """(B, T) the completion tokens."""
    advantages: torch.Tensor
    """(B,) or (B, T) TRL's advantages."""
    entropies: torch.Tensor | None = None
    """(B, T) token entropies (nats), when TRL computed them."""


def _mean_advantage(batch: PolicyPass) -> torch.Tensor:
    advantages, mask = batch.advantages.float(), batch.scored_mask.float()
    if advantages.dim() == 2:  # per-token advantages: the sign of their mean decides
        advantages = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return advantages


def _entropy_sum(batch: PolicyPass) -> torch.Tensor:
    if batch.entropies is None:
        return torch.zeros_like(batch.log_s.float())
    return (batch.entropies.float() * batch.scored_mask.float()).sum(-1)


RESPONSE_FIELDS: dict[str, Callable[[PolicyPass], torch.Tensor]] = {
    "log_ratio": lambda batch: batch.log_s.float(),
    "advantage": _mean_advantage,
    "length": lambda batch: batch.completion_mask.float().sum(-1),
    "entropy_sum": _entropy_sum,
    "tokens": lambda batch: batch.scored_mask.float().sum(-1),
    "valid": lambda batch: torch.ones_like(batch.log_s.float()),
}
"""The per-response diagnostics, one entry each: its name and how a policy pass gives it.

log s_i, the response's (mean) advantage, its completion length in tokens, the sum of its
token entropies (nats) and its number of scored tokens, and 1 for a real row (0 = padding
added to even out ranks before a gather). Rows are one float32 tensor (a column per field,
in this order) so that one gather moves them all; read a column by name with `column`."""

ROW_COLUMNS = tuple(RESPONSE_FIELDS)
"""The column names of a row tensor, in order."""


def response_rows(batch: PolicyPass) -> torch.Tensor:
    """(B, len(ROW_COLUMNS)): one row per response, a column per field of `RESPONSE_FIELDS`."""
    return torch.stack([field(batch) for field in RESPONSE_FIELDS.values()], dim=1)


def column(rows: Any, name: str) -> Any:
    """One field of every row, by name (a tensor for a tensor, an array for an array)."""
    return rows[:, ROW_COLUMNS.index(name)]


def real_rows(rows: Any) -> Any:
    """The rows that are responses, not the padding a gather added."""
    return rows[column(rows, "valid") > 0]


def bucket_labels(length_buckets: tuple[int, ...]) -> list[str]:
    """Metric suffixes for the length buckets: ('len_0-64', 'len_64-256', ..., 'len_1024-inf')."""
    edges = [0, *length_buckets]
    labels = [f"len_{lo}-{hi}" for lo, hi in itertools.pairwise(edges)]
    return [*labels, f"len_{edges[-1]}-inf"]


ArrayLike = torch.Tensor | np.ndarray
"""The statistics take CPU tensors or arrays; they run in numpy because a logging step
summarises a few hundred numbers, where torch's per-op overhead would dominate."""


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def log_ratio_quantiles(log_s: ArrayLike) -> dict[str, float]:
    """mean, std, p5, p50, p95, min, max of log s_i (nats per token); empty dict if no data."""
    x = _np(log_s).astype(np.float64).ravel()
    if x.size == 0:
        return {}
    ordered = np.sort(x)
    if math.isnan(ordered[-1]):  # NaN sorts last: numpy gives NaN for all (std of one value: 0)
        stats = dict.fromkeys(("mean", "std", "p5", "p50", "p95", "min", "max"), math.nan)
        return {**stats, "std": 0.0} if x.size == 1 else stats
    values = ordered.tolist()
    return {
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "p5": _sorted_quantile(values, 0.05),
        "p50": _sorted_quantile(values, 0.5),
        "p95": _sorted_quantile(values, 0.95),
        "min": values[0],
        "max": values[-1],
    }


def _sorted_quantile(values: list[float], q: float) -> float:
    """np.quantile(values, q) with its default linear interpolation, bit for bit, on sorted values:
    numpy's own call costs ~30 us of dispatch per logging step for a few hundred numbers."""
    position = (len(values) - 1) * q
    if position >= len(values) - 1:
        return values[-1]
    below = math.floor(position)
    gamma = position - below
    a, b = values[below], values[below + 1]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma  # numpy's _lerp


def clip_masks(
    log_s: ArrayLike, advantages: ArrayLike, eps_low: float, eps_high: float
) -> dict[str, np.ndarray]:
    """Boolean masks per response, with TRL's rule applied to s_i = exp(log s_i) in float32.

    'low'/'high' are active clips (the min() picks the clipped term, zero gradient);
    'outside_low'/'outside_high' only say s_i left the range, whatever the advantage sign.
    """
    s = np.exp(_np(log_s).astype(np.float32))
    adv = _np(advantages)
    outside_low = s < np.float32(1 - eps_low)
    outside_high = s > np.float32(1 + eps_high)
    return {
        "low": outside_low & (adv < 0),
        "high": outside_high & (adv > 0),
        "outside_low": outside_low,
        "outside_high": outside_high,
    }


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else math.nan


def clip_fractions(
    log_s: ArrayLike, advantages: ArrayLike, eps_low: float, eps_high: float
) -> dict[str, float]:
    """Clip fractions overall and by advantage sign (0-1); NaN where a group is empty."""
    m = clip_masks(log_s, advantages, eps_low, eps_high)
    return _fractions(m, _np(advantages).tolist(), None, ())


def clip_fraction_by_length(
    log_s: ArrayLike,
    advantages: ArrayLike,
    lengths: ArrayLike,
    eps_low: float,
    eps_high: float,
    length_buckets: tuple[int, ...],
) -> dict[str, float]:
    """Active-clip fraction per completion-length bucket; empty buckets are left out."""
    m = clip_masks(log_s, advantages, eps_low, eps_high)
    counted = _fractions(m, _np(advantages).tolist(), _np(lengths).tolist(), length_buckets)
    buckets = {names.clip_by_length(label) for label in bucket_labels(length_buckets)}
    return {k: v for k, v in counted.items() if k in buckets}


def _fractions(
    m: dict[str, np.ndarray], adv: list[float], lengths: list[float] | None, length_buckets: tuple[int, ...]
) -> dict[str, float]:
    """The clip fractions of `clip_fractions`, and by length bucket when `lengths` are given,
    counted in plain Python over the masks' lists: a logging step has a few hundred responses,
    and there the ~40 small numpy calls this replaced cost more than the counting."""
    low = [flag and a < 0 for flag, a in zip(m["outside_low"].tolist(), adv, strict=True)]
    high = [flag and a > 0 for flag, a in zip(m["outside_high"].tolist(), adv, strict=True)]
    region = [a or b for a, b in zip(low, high, strict=True)]
    out = {
        names.CLIP_LOW: _share(low),
        names.CLIP_HIGH: _share(high),
        names.CLIP_REGION: _share(region),
        names.CLIP_POS_ADV: _share([h for h, a in zip(high, adv, strict=True) if a > 0]),
        names.CLIP_NEG_ADV: _share([lo for lo, a in zip(low, adv, strict=True) if a < 0]),
        names.OUTSIDE_LOW: _share(m["outside_low"].tolist()),
        names.OUTSIDE_HIGH: _share(m["outside_high"].tolist()),
    }
    if lengths is None:
        return out
    edges = [0, *length_buckets, math.inf]
    for label, lo, hi in zip(bucket_labels(length_buckets), edges[:-1], edges[1:], strict=True):
        inside = [r for r, n in zip(region, lengths, strict=True) if lo <= n < hi]
        if inside:  # empty buckets are left out
            out[names.clip_by_length(label)] = _share(inside)
    return out


def summarize_rows(
    rows: ArrayLike, eps_low: float, eps_high: float, length_buckets: tuple[int, ...]
) -> dict[str, float]:
    """All per-minibatch statistics from gathered rows (columns: ROW_COLUMNS), unprefixed."""
    rows = real_rows(_np(rows).astype(np.float64))
    if rows.size == 0:
        return {}
    log_s, adv, length = column(rows, "log_ratio"), column(rows, "advantage"), column(rows, "length")
    ent, tok = column(rows, "entropy_sum"), column(rows, "tokens")
    stats = {names.log_ratio(k): v for k, v in log_ratio_quantiles(log_s).items()}
    masks = clip_masks(log_s, adv, eps_low, eps_high)  # once for both families of fractions
    stats.update(_fractions(masks, adv.tolist(), length.tolist(), length_buckets))
    stats[names.ENTROPY] = float(ent.sum() / max(tok.sum(), 1.0))
    stats[names.RESPONSES] = float(rows.shape[0])
    return {k: v for k, v in stats.items() if not math.isnan(v)}
