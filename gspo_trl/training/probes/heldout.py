"""Held-out scoring as a probe (gspo_trl.training.heldout.scoring holds the scoring): its
callback scores before training, every `every_steps` steps and at the end. The final score runs
from a callback ahead of the trackers' (they close their run in their own on_train_end; trackio
would open a second run for a score logged later); the scoring callback stays after them, so they
are set up when it first logs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gspo_trl.core.metric_names as names
from gspo_trl.training.heldout.scoring import HeldoutCallback, HeldoutSettings
from gspo_trl.training.probes.base import Probe, ProbeCallbacks
from gspo_trl.training.probes.perf import timed


class HeldoutProbe(Probe):
    """`heldout/*` on `dataset`, graded by `grader`, as `settings` say."""

    def __init__(self, dataset: Any, grader: Callable[..., Any], settings: HeldoutSettings) -> None:
        self.dataset, self.grader, self.settings = dataset, grader, settings
        self.callback: HeldoutCallback | None = None

    def attach(self, trainer: Any) -> None:
        self.callback = HeldoutCallback(
            trainer, self.dataset, self.grader, self.settings, lambda: timed(trainer, names.PHASE_HELDOUT)
        )

    def callbacks(self) -> ProbeCallbacks:
        return ProbeCallbacks(
            before_reporting=[self.callback.final_score_first()], after_reporting=[self.callback]
        )
