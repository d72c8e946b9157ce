"""The GSPO diagnostics as a probe: one row per response from the loss's own policy pass, gathered
across ranks, summarised per minibatch at each log (gspo/mb{k}/*, gspo/offpolicy/*,
gspo/zero_variance_groups; gspo_trl.training.ratio_stats holds the numbers' definitions). No extra
forward pass, no recomputed entropy."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections import DiagnosticsConfig
from gspo_trl.training.probes.base import LossCall, PolicyForward, Probe
from gspo_trl.training.ratio_stats import PolicyPass, response_rows, summarize_rows
from gspo_trl.training.reporting.line_parts import LinePart, logged_number

logger = logging.getLogger(__name__)

CLIP_KEY = names.under(names.OFFPOLICY, names.CLIP_REGION)
SPREAD_KEY = names.under(names.OFFPOLICY, names.log_ratio("std"))


class ClipAlarm:
    """Warns once per kind when off-policy clipping says eps (or the LR) is wrong.

    Fed one pooled off-policy summary per logging step. "everything clipped": more than
    `warn_clip_fraction` of positive-advantage responses clipped for `warn_after_steps`
    consecutive steps (the extra minibatches are wasted). "nothing clipped": zero clipped
    responses for `warn_no_clip_steps` consecutive steps (the trust region does nothing).
    """

    def __init__(self, config: DiagnosticsConfig) -> None:
        self.config = config
        self.high_streak = 0
        self.none_streak = 0
        self.warned: set[str] = set()
        self.recent: list[float] = []

    def update(self, offpolicy: dict[str, float], eps_low: float, eps_high: float) -> str | None:
        """Advance the streaks with one step's pooled off-policy stats; return a warning or None."""
        pos = offpolicy.get(names.CLIP_POS_ADV)
        region = offpolicy.get(names.CLIP_REGION)
        if pos is not None and pos > self.config.warn_clip_fraction:
            self.high_streak += 1
            self.recent = [*self.recent, pos][-self.config.warn_after_steps :]
        else:
            self.high_streak, self.recent = 0, []
        self.none_streak = self.none_streak + 1 if region == 0.0 else 0
        p5 = offpolicy.get(names.log_ratio("p5"), math.nan)
        p95 = offpolicy.get(names.log_ratio("p95"), math.nan)
        message = None
        if self.high_streak >= self.config.warn_after_steps and "high" not in self.warned:
            self.warned.add("high")
            message = (
                f"GSPO: off-policy minibatches clipped {', '.join(f'{p:.0%}' for p in self.recent)} of "
                f"positive-advantage responses over the last {self.high_streak} logging steps "
                f"(threshold {self.config.warn_clip_fraction:.0%}; eps_low={eps_low:g}, "
                f"eps_high={eps_high:g}; log s_i p5/p95 = {p5:.2e}/{p95:.2e}). "
                "The extra minibatches are mostly wasted: widen epsilon_high "
                "(see `gspo-trl calibrate`) or lower the learning rate."
            )
        elif self.none_streak >= self.config.warn_no_clip_steps and "none" not in self.warned:
            self.warned.add("none")
            message = (
                f"GSPO: no off-policy response clipped in {self.none_streak} consecutive logging steps "
                f"(eps_low={eps_low:g}, eps_high={eps_high:g}; log s_i p5/p95 = {p5:.2e}/{p95:.2e}). "
                "The trust region does nothing: consider fewer, larger steps or a narrower range."
            )
        if message:
            logger.warning(message)
        return message


class DiagnosticsProbe(Probe):
    """Records response rows in each training update; turns them into gspo/* metrics at each log."""

    alarm_loggers = (__name__,)  # ClipAlarm

    def __init__(self, config: DiagnosticsConfig) -> None:
        self.config = config
        self.alarm = ClipAlarm(config)
        self.rows: dict[int, list[torch.Tensor]] = defaultdict(list)
        self.row_sink: list[tuple[int, torch.Tensor]] | None = None
        """Set to a list to also keep every gathered (minibatch index, rows) pair (calibrate)."""
        self._forward: PolicyForward | None = None

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        """`clip 1.2%`, `log s std 3.0e-04`, `zero-var 25%`: the off-policy clip rate, the spread of
        log s_i, and the share of groups whose rewards tie."""
        parts = []
        clip = logged_number(logs, CLIP_KEY)
        if clip is not None:
            parts.append(LinePart(30, f"clip {clip:.1%}"))
        spread = logged_number(logs, SPREAD_KEY)
        if spread is not None:
            parts.append(LinePart(40, f"log s std {spread:.1e}"))
        zero = logged_number(logs, names.ZERO_VARIANCE_GROUPS)
        if zero is not None:
            parts.append(LinePart(80, f"zero-var {zero:.0%}"))
        return parts

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        self._forward = policy

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        forward, self._forward = self._forward, None
        if not (self.config.enabled and loss.training and forward is not None):
            return
        rows = response_rows(
            PolicyPass(
                log_s=forward.log_s,
                scored_mask=forward.scored_mask,
                completion_mask=loss.batch["completion_mask"],
                advantages=loss.batch["advantages"],
                entropies=None if forward.entropies is None else forward.entropies.detach(),
            )
        )
        accelerator = trainer.accelerator
        if accelerator.num_processes > 1:  # ranks may hold different batch sizes: pad, then gather
            rows = accelerator.gather(accelerator.pad_across_processes(rows, dim=0, pad_index=0))
        self.rows[loss.minibatch].append(rows.detach())

    def statistics(self, trainer: Any) -> dict[str, float]:
        """Turn the rows recorded since the last log into `gspo/*` metrics and clear them."""
        eps = (trainer.epsilon_low, trainer.epsilon_high, self.config.length_buckets)
        out: dict[str, float] = {}
        offpolicy: list[tuple[torch.Tensor, dict[str, float]]] = []
        for mb in sorted(self.rows):
            rows = torch.cat(self.rows[mb]).cpu()
            if self.row_sink is not None:
                self.row_sink.append((mb, rows))
            stats = summarize_rows(rows, *eps)
            out.update({names.under(names.minibatch(mb), k): v for k, v in stats.items()})
            if mb >= 2:
                offpolicy.append((rows, stats))
        self.rows.clear()
        if offpolicy:  # usually one off-policy minibatch per logging step: reuse its numbers
            pooled = (
                offpolicy[0][1]
                if len(offpolicy) == 1
                else summarize_rows(torch.cat([r for r, _ in offpolicy]), *eps)
            )
            out.update({names.under(names.OFFPOLICY, k): v for k, v in pooled.items()})
            if trainer.accelerator.is_main_process:
                self.alarm.update(pooled, trainer.epsilon_low, trainer.epsilon_high)
        return out

    def on_log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        if not trainer.model.training:
            return {}
        out: dict[str, float] = {}
        zero_std = [v for v in trainer.logged_values(names.TRL_ZERO_VARIANCE) if v == v]
        if zero_std:
            out[names.ZERO_VARIANCE_GROUPS] = sum(zero_std) / len(zero_std)
        if self.rows:
            out.update(self.statistics(trainer))
        return out
