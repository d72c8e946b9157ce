"""The engine-mismatch guard: is the inference engine's pi_old good enough for GSPO's clip range?

With `engine.old_logprobs: engine`, pi_old is what vLLM reported while sampling. On the first
minibatch of a rollout batch the trainer has not been updated yet, so there
log s_i = mean_t [log pi_trainer(y_it) - log pi_engine(y_it)] is the engine mismatch alone, and
the trainer computes it anyway for the loss: the guard costs nothing but a gather of one number
per response. A mismatch matters in two ways:

- bias: a systematic shift moves every s_i the same way, eating into one side of the clip range
  (GSPO's paper range is [1 - 3e-4, 1 + 4e-4]); flagged when |mean| exceeds
  `max_bias_fraction` of the narrower half-range in log space;
- spread: responses already outside the clip range on the on-policy minibatch lose their
  gradient (one advantage sign) before the policy has moved; flagged when more than
  `max_outside_clip` of them are.

Metric keys: `gspo/engine_mismatch/{mean,std,outside_clip}` (nats; nats; fraction 0-1), one
value per rollout batch, averaged over a logging step by TRL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gspo_trl.config.sections import EngineConfig

METRIC_PREFIX = "gspo/engine_mismatch/"


@dataclass
class MismatchVerdict:
    """One rollout batch's on-policy log s_i, summarised; `problem` is None when it passes."""

    mean: float
    std: float
    outside_clip: float
    responses: int
    problem: str | None

    def metrics(self) -> dict[str, float]:
        return {
            f"{METRIC_PREFIX}mean": self.mean,
            f"{METRIC_PREFIX}std": self.std,
            f"{METRIC_PREFIX}outside_clip": self.outside_clip,
        }


def judge_mismatch(
    log_s: torch.Tensor, eps_low: float, eps_high: float, config: EngineConfig
) -> MismatchVerdict:
    """Summarise per-response log s_i (trainer minus engine, nats) against the clip range."""
    x = log_s.double().flatten()
    x = x[~x.isnan()]
    lo, hi = math.log1p(-eps_low), math.log1p(eps_high)
    mean = x.mean().item() if x.numel() else 0.0
    std = x.std().item() if x.numel() > 1 else 0.0
    outside = ((x < lo) | (x > hi)).double().mean().item() if x.numel() else 0.0
    bias_limit = config.max_bias_fraction * min(-lo, hi)
    problems = []
    if abs(mean) > bias_limit:
        problems.append(
            f"mean log s_i {mean:+.2e} nats is past {config.max_bias_fraction:g} of the clip half-range "
            f"({bias_limit:.2e})"
        )
    if outside > config.max_outside_clip:
        problems.append(
            f"{outside:.1%} of responses are outside the clip range from the mismatch alone "
            f"(limit {config.max_outside_clip:.1%})"
        )
    return MismatchVerdict(mean, std, outside, int(x.numel()), "; ".join(problems) or None)


class EngineMismatchGuard:
    """Collects the on-policy minibatch's log s_i over its micro-batches; judges it once."""

    def __init__(self, config: EngineConfig) -> None:
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
        verdict = judge_mismatch(torch.cat(self._pending), eps_low, eps_high, self.config)
        self._pending.clear()
        self.verdicts.append(verdict)
        self.flagged_batches += verdict.problem is not None
        return verdict
