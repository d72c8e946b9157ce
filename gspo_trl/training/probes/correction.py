"""`engine.correction` as a probe: each response's loss weighed for the engine/trainer gap, and logged.

The arithmetic is gspo_trl.training.engine.response_weights's; this holds a run's state: the thresholds
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
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import DiagnosticsConfig
from gspo_trl.config.sections.engine_correction import THRESHOLD_KEYS, CorrectionSettings, read_calibration
from gspo_trl.training.engine.response_weights import (
    ResponseDivergence,
    Thresholds,
    auto_thresholds,
    correction_weights,
    divergence_percentiles,
    response_divergence,
    summarize_weights,
)
from gspo_trl.training.probes.base import LossCall, PolicyForward, Probe
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe
from gspo_trl.training.reporting.line_parts import BANNER_GSPO, LinePart, logged_number

logger = logging.getLogger(__name__)  # warnings become the console's `!` alarm lines

Gather = Callable[[torch.Tensor], torch.Tensor]
"""Rows of this rank -> rows of every rank (NaN-padded); the identity on one process."""


def _identity(rows: torch.Tensor) -> torch.Tensor:
    return rows


class CorrectionRun:
    """One run's engine.correction: `weigh` per update, `finish_rollout` per rollout batch."""

    def __init__(
        self, config: CorrectionSettings, length_buckets: tuple[int, ...], gather: Gather = _identity
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
        result = correction_weights(divergence, self.config.correction, self.thresholds)
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
        rejected = metrics[names.CORRECTION_REJECTED]
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


class CorrectionProbe(Probe):
    """engine.correction in a run (inert unless `engine.correction` is truncate or reject)."""

    alarm_loggers = (__name__,)  # max_rejected
    runs_after = (EngineLogprobsProbe,)  # its answer decides what pi_old is

    def __init__(self, config: CorrectionSettings, diagnostics: DiagnosticsConfig | None = None) -> None:
        self.config = config
        self.correction = CorrectionRun(config, (diagnostics or DiagnosticsConfig()).length_buckets)
        self._updates_per_rollout = 1
        self._loss_weight = ExitStack()
        self._summaries: list[dict[str, float]] = []

    @property
    def active(self) -> bool:
        return self.correction.active

    def attach(self, trainer: Any) -> None:
        accelerator = trainer.accelerator
        if accelerator.num_processes > 1:

            def gather(rows: torch.Tensor) -> torch.Tensor:
                padded = accelerator.pad_across_processes(
                    rows.to(accelerator.device), dim=0, pad_index=float("nan")
                )
                return accelerator.gather(padded).cpu()

            self.correction.gather = gather
        args = trainer.args
        generate_every = args.steps_per_generation * trainer.num_iterations
        self._updates_per_rollout = generate_every // args.gradient_accumulation_steps

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        if not self.correction.active:
            return []
        return [LinePart(BANNER_GSPO + 11, f"  engine   correction {self.correction.describe()}")]

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        """`w_i 0.998 [0.95, 1.02]`: the correction's weight w_i = pi_old / mu, mean [p1, p99]."""
        weight = logged_number(logs, names.CORRECTION_WEIGHT_MEAN)
        if weight is None:
            return []
        low = logged_number(logs, names.CORRECTION_WEIGHT_P1)
        high = logged_number(logs, names.CORRECTION_WEIGHT_P99)
        spread = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
        return [LinePart(70, f"w_i {weight:.3f}{spread}")]

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        if self.active and trainer.model.training:
            mask = batch["completion_mask"] * batch.get("tool_mask", 1)
            self.correction.calibrate_rollout(
                batch.get("old_per_token_logps"), batch.get("sampling_per_token_logps"), mask
            )
        return batch

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        if self.active and loss.training:
            self._loss_weight.enter_context(trainer.trl_loss_weight())

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        if not (self.active and policy.loss.training):
            return
        engine = trainer.probes.find(EngineLogprobsProbe)
        from_engine = engine is not None and engine.engine.active  # pi_old = mu: compare the update's own
        pi = policy.logps if from_engine or policy.old_logps is None else policy.old_logps
        inputs = policy.loss.inputs
        inputs["importance_sampling_ratio"] = self.correction.weigh(
            pi, inputs.get("sampling_per_token_logps"), policy.scored_mask
        )

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        self._loss_weight.close()
        if (
            self.active
            and loss.training
            and loss.last_micro_batch
            and loss.minibatch == self._updates_per_rollout
        ):
            self._summaries.append(self.correction.finish_rollout())

    def on_train_end(self, trainer: Any) -> None:
        self._loss_weight.close()  # also when the loss raised

    def on_log(self, trainer: Any, logs: Any) -> dict[str, float]:
        summaries, self._summaries = [s for s in self._summaries if s], []
        keys = {key for s in summaries for key in s}
        return {
            key: sum(s[key] for s in summaries if key in s) / sum(key in s for s in summaries) for key in keys
        }
