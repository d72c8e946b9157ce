"""`engine.correction` in a run: weigh each response's loss for the engine/trainer gap, and log it.

The arithmetic is gspo_trl.training.engine.correction; this holds a run's state: the thresholds
(fixed, or `auto` and calibrated once), the rows of the current rollout batch, and the alarm.
- `old_logprobs: trainer`: d_t = log pi_old - log mu, TRL's recomputed pi_old against vLLM's
  sampling log-probs, both in TRL's rollout dict and split with it, so each update weighs its
  own responses; w_i corrects pi_old vs mu.
- `old_logprobs: engine`: pi_old = mu, so w_i = 1; the token rules compare the update's own
  log-probs (detached) with mu, as verl's bypass mode does.
The weight multiplies TRL's `per_token_loss` where TRL's own vLLM correction does, as a (B, 1)
tensor, so under `loss_type: grpo` the loss is mean_i w_i L_i. `auto` thresholds come from a
`check-logprobs --json` report (engine.thresholds_from) or from the first weighed batch.
The TRL and verl lines this rests on, and the metrics: docs/engine-logprobs.md ("Correcting the
mismatch").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import EngineConfig
from gspo_trl.config.sections.engine_correction import THRESHOLD_KEYS, read_calibration
from gspo_trl.training.diagnostics import bucket_labels
from gspo_trl.training.engine.correction import (
    ResponseDivergence,
    Thresholds,
    auto_thresholds,
    behaviour_weights,
    divergence_percentiles,
    response_divergence,
)

logger = logging.getLogger(__name__)  # warnings become the console's `!` alarm lines

Gather = Callable[[torch.Tensor], torch.Tensor]
"""Rows of this rank -> rows of every rank (NaN-padded); the identity on one process."""


def _identity(rows: torch.Tensor) -> torch.Tensor:
    return rows


class BehaviourCorrection:
    """One run's behaviour correction: `weigh` per update, `finish_rollout` per rollout batch."""

    def __init__(
        self, config: EngineConfig, length_buckets: tuple[int, ...], gather: Gather = _identity
    ) -> None:
        self.config = config
        self.active = config.corrects
        self.length_buckets = length_buckets
        self.gather = gather
        self.thresholds: Thresholds | None = None
        """None until the `auto` values are measured."""
        self.rejection_alarms = 0
        self._rows: list[torch.Tensor] = []
        self.summaries: list[dict[str, float]] = []
        """Every rollout batch's metrics, in order (tests and benchmarks read them)."""
        self._auto = {k for k in THRESHOLD_KEYS if getattr(config, k) == "auto"}
        if config.correction == "truncate":
            self._auto.discard("weight_min")  # truncate has no lower bound
        if self.active and (config.thresholds_from is not None or not self._auto):
            percentiles = read_calibration(config.thresholds_from) if self._auto else None
            self._set_thresholds(percentiles, f"auto from {config.thresholds_from}" if self._auto else "")

    # --- thresholds ----------------------------------------------------------------------------
    def _set_thresholds(self, percentiles: dict[str, float] | None, how: str) -> None:
        chosen = auto_thresholds(percentiles, self._auto) if percentiles is not None else {}
        values = {}
        for key in THRESHOLD_KEYS:
            value = getattr(self.config, key)
            values[key] = chosen.get(key) if value == "auto" else value
        if self.config.correction == "truncate":
            values["weight_min"] = None
        self.thresholds = Thresholds(**values, how=how or "set in the recipe")
        if percentiles is not None:
            logger.info("engine.correction thresholds chosen: %s", self.thresholds.describe())

    def describe(self) -> str:
        """One line for the log: mode, what it compares, and the thresholds (or how they will be chosen)."""
        if not self.active:
            return "off"
        compares = (
            "the update's log-probs vs the engine's "
            "(old_logprobs: engine: pi_old = mu, w_i = 1, token rules only)"
            if self.config.from_engine
            else "w_i = exp(mean_t(log pi_old - log mu)) per response"
        )
        if self.thresholds is None:
            chosen = (
                f"`auto` ({', '.join(sorted(self._auto))}) from the first rollout batch's measured mismatch"
            )
        else:
            chosen = self.thresholds.describe()
        return f"{self.config.correction}, {compares}; {chosen}"

    def _calibrate(self, divergence: ResponseDivergence, how: str) -> None:
        columns = torch.stack(
            [divergence.log_weight, divergence.max_token, divergence.k3, divergence.lengths], dim=1
        )
        pooled = self.gather(columns.double())
        pooled = pooled[~pooled.isnan().any(dim=1)]
        merged = ResponseDivergence(pooled[:, 0], pooled[:, 1], pooled[:, 2], pooled[:, 3])
        self._set_thresholds(divergence_percentiles(merged), how)

    def calibrate_rollout(
        self, log_pi_old: torch.Tensor | None, log_mu: torch.Tensor | None, mask: torch.Tensor
    ) -> None:
        """Trainer mode: take `auto` thresholds from a whole rollout batch, before its first update."""
        if not self.active or self.thresholds is not None or self.config.from_engine:
            return
        if log_pi_old is None or log_mu is None:
            return  # pi_old not recomputed (on-policy updates): calibrated at the first update
        self._calibrate(response_divergence(log_pi_old, log_mu, mask), "auto from the first rollout batch")

    # --- per update ----------------------------------------------------------------------------
    def weigh(self, log_pi: torch.Tensor, log_mu: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        """Each response's loss weight (B, 1), in `log_pi`'s dtype: the tensor TRL multiplies
        `per_token_loss` by. `log_pi` is pi_old (trainer mode) or the update's own log-probs
        (engine mode); without engine log-probs every weight is 1."""
        if log_mu is None:
            return torch.ones(log_pi.shape[0], 1, dtype=log_pi.dtype, device=log_pi.device)
        divergence = response_divergence(log_pi.detach(), log_mu, mask)
        if self.thresholds is None:
            self._calibrate(divergence, "auto from the first rollout batch")
        result = behaviour_weights(divergence, self.config.correction, self.thresholds)
        raw = torch.exp(divergence.log_weight)
        self._rows.append(
            torch.stack(
                [result.weight, raw, result.truncated.double(), result.rejected.double(), divergence.lengths],
                1,
            ).cpu()
        )
        return result.weight.to(dtype=log_pi.dtype, device=log_pi.device).unsqueeze(-1)

    # --- per rollout batch ---------------------------------------------------------------------
    def finish_rollout(self) -> dict[str, float]:
        """Metrics of the responses weighed since the last call (every rank's), and the alarm."""
        if not self._rows:
            return {}
        rows = self.gather(torch.cat(self._rows).double())
        self._rows.clear()
        rows = rows[~rows.isnan().any(dim=1)]
        metrics = summarize_weights(rows, self.length_buckets)
        self.summaries.append(metrics)
        rejected = metrics[names.BEHAVIOUR_REJECTED]
        if rejected > self.config.max_rejected:
            self.rejection_alarms += 1
            if self.rejection_alarms == 1:
                logger.warning(
                    "engine.correction rejected %.1f%% of a rollout batch's responses (engine.max_rejected "
                    "%.1f%%): the engine and the trainer disagree more than when the thresholds were set "
                    "(%s); see gspo/behaviour/rejected/len_* and measure with `gspo-trl check-logprobs` "
                    "(warned once)",
                    100 * rejected,
                    100 * self.config.max_rejected,
                    self.thresholds.describe() if self.thresholds else "?",
                )
        return metrics


@contextmanager
def trl_loss_weight(trainer: Any, on: bool) -> Iterator[None]:
    """Let TRL's loss apply `inputs["importance_sampling_ratio"]` for this call: it multiplies
    `per_token_loss` by it only `if self.use_vllm and self.vllm_importance_sampling_correction and
    self.loss_type != "vespo"` (grpo_trainer.py:3146-3147), the one read of that flag inside
    `_compute_loss`. TRL's own correction is off whenever ours is on
    (gspo_trl.config.sections.engine_correction), so its rollout code never sees the flag set."""
    if not on:
        yield
        return
    before = trainer.vllm_importance_sampling_correction
    trainer.vllm_importance_sampling_correction = True
    try:
        yield
    finally:
        trainer.vllm_importance_sampling_correction = before


def summarize_weights(rows: torch.Tensor, length_buckets: tuple[int, ...]) -> dict[str, float]:
    """`gspo/behaviour/*` from rows [weight, w_i, truncated, rejected, length], one per response."""
    weight, raw, truncated, rejected, lengths = rows.double().unbind(1)
    out = {
        names.BEHAVIOUR_WEIGHT_MEAN: weight.mean().item(),
        names.BEHAVIOUR_WEIGHT_P1: torch.quantile(raw, 0.01).item(),
        names.BEHAVIOUR_WEIGHT_P99: torch.quantile(raw, 0.99).item(),
        names.BEHAVIOUR_TRUNCATED: truncated.mean().item(),
        names.BEHAVIOUR_REJECTED: rejected.mean().item(),
    }
    edges = [0, *length_buckets, float("inf")]
    for label, low, high in zip(bucket_labels(length_buckets), edges[:-1], edges[1:], strict=True):
        in_bucket = (lengths >= low) & (lengths < high)
        if in_bucket.any():
            for share, flags in (
                (names.BEHAVIOUR_TRUNCATED, truncated),
                (names.BEHAVIOUR_REJECTED, rejected),
            ):
                out[names.behaviour_by_length(share, label)] = flags[in_bucket].mean().item()
    return out
