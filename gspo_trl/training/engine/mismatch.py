"""The engine-mismatch guard: is the inference engine's pi_old good enough for GSPO's clip range?

With `engine.old_logprobs: engine`, on the first minibatch of a rollout batch the trainer has not
moved, so log s_i = mean_t [log pi_trainer - log pi_engine] is the engine mismatch alone, computed
by the loss anyway: the guard costs a gather of one number per response. It flags a bias (|mean|
over `max_bias_fraction` of the narrower clip half-range, in log space) and a spread (more than
`max_outside_clip` of the responses outside the clip range before the policy has moved).

`judge_mismatch` is the one verdict on a mismatch: `gspo-trl check-logprobs` applies it, with
the same default limits, to the delta_i it measures before a run.
Metric keys: `gspo/engine_mismatch/{mean,std,outside_clip}` (nats; nats; fraction 0-1), one value
per rollout batch, averaged over a logging step by TRL. Docs: docs/engine-logprobs.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import MAX_BIAS_FRACTION, MAX_OUTSIDE_CLIP
from gspo_trl.config.sections.engine import OldLogprobsSettings


@dataclass
class MismatchVerdict:
    """Per-response log s_i (trainer minus engine), summarised; `problem` is None when it passes."""

    mean: float
    std: float
    outside_clip: float
    responses: int
    problem: str | None
    bias_limit: float = 0.0
    """The |mean| allowed: max_bias_fraction x the narrower clip half-range in log space (nats)."""

    def metrics(self) -> dict[str, float]:
        return {
            names.ENGINE_MISMATCH_MEAN: self.mean,
            names.ENGINE_MISMATCH_STD: self.std,
            names.ENGINE_MISMATCH_OUTSIDE_CLIP: self.outside_clip,
        }


def judge_mismatch(
    log_s: torch.Tensor,
    eps_low: float,
    eps_high: float,
    max_bias_fraction: float = MAX_BIAS_FRACTION,
    max_outside_clip: float = MAX_OUTSIDE_CLIP,
) -> MismatchVerdict:
    """The engine-mismatch verdict, for the run's guard and `gspo-trl check-logprobs` alike.

    `log_s` holds per-response log s_i = mean_t [log pi_trainer - log pi_engine] (nats; NaN
    entries, padding from a gather, are skipped). It fails when |mean| exceeds
    `max_bias_fraction` of min(-log(1 - eps_low), log(1 + eps_high)) or when more than
    `max_outside_clip` of the responses lie outside that range (the thresholds' reasons:
    gspo_trl.config.sections.MAX_BIAS_FRACTION, MAX_OUTSIDE_CLIP).
    """
    x = log_s.double().flatten()
    x = x[~x.isnan()]
    lo, hi = math.log1p(-eps_low), math.log1p(eps_high)
    mean = x.mean().item() if x.numel() else 0.0
    std = x.std().item() if x.numel() > 1 else 0.0
    outside = ((x < lo) | (x > hi)).double().mean().item() if x.numel() else 0.0
    bias_limit = max_bias_fraction * min(-lo, hi)
    problems = []
    if abs(mean) > bias_limit:
        problems.append(
            f"mean log s_i {mean:+.2e} nats is past {max_bias_fraction:g} of the clip half-range "
            f"({bias_limit:.2e})"
        )
    if outside > max_outside_clip:
        problems.append(
            f"{outside:.1%} of responses are outside the clip range from the mismatch alone "
            f"(limit {max_outside_clip:.1%})"
        )
    return MismatchVerdict(mean, std, outside, int(x.numel()), "; ".join(problems) or None, bias_limit)


class EngineMismatchGuard:
    """Collects the on-policy minibatch's log s_i over its micro-batches; judges it once."""

    def __init__(self, config: OldLogprobsSettings) -> None:
        self.config = config
        self._pending: list[torch.Tensor] = []
        self.flagged_batches = 0
        self.verdicts: list[MismatchVerdict] = []
        """Every rollout batch's verdict, in order (tests and benchmarks read it)."""

    def observe(self, log_s: torch.Tensor) -> None:
        self._pending.append(log_s.detach().double().cpu())

    def finish(self, eps_low: float, eps_high: float) -> MismatchVerdict | None:
        """Judge what was observed since the last call; None when nothing was."""
        if not self._pending:
            return None
        limits = (self.config.max_bias_fraction, self.config.max_outside_clip)
        verdict = judge_mismatch(torch.cat(self._pending), eps_low, eps_high, *limits)
        self._pending.clear()
        self.verdicts.append(verdict)
        self.flagged_batches += verdict.problem is not None
        return verdict
