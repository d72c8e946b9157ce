"""Ctrl-C or SIGTERM during training: finish the current step, save a checkpoint, stop cleanly.

The first SIGINT (Ctrl-C) or SIGTERM (`scancel`, a Slurm time limit or preemption, a
Kubernetes eviction, `kill`) only raises a flag; `StopOnInterrupt` sees it at the end of the
optimizer step and asks the Trainer to save a checkpoint and stop, so `gspo-trl train --resume`
continues from exactly there. A second signal gets the handling it had before (SIGINT:
KeyboardInterrupt, SIGTERM: death), at once and without a checkpoint.

Under `accelerate launch` the launcher (torch's elastic agent) is what the terminal or the
scheduler signals; it passes the same signal on to every rank and kills them 30 s later
whatever they are doing, so the step in progress must end within that time for the
checkpoint to be written (schedulers give SIGTERM a grace period too: Slurm's KillWait, 30 s
by default). Ranks may see the signal in different steps: the flag is reduced across ranks at
each step end (one scalar), so all ranks save and stop at the same step instead of waiting on
each other forever.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

from transformers import TrainerCallback

from gspo_trl.core.ranks import any_rank

logger = logging.getLogger(__name__)


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C or SIGTERM after saving `checkpoint` (None when nothing was
    saved) at `step` (None: stopped inside a step, nothing saved)."""

    def __init__(self, checkpoint: str | None, step: int | None = None) -> None:
        saved = f"checkpoint {checkpoint} saved" if checkpoint else "no checkpoint saved"
        where = f"stopped at step {step}; " if step is not None else ""
        resume = ": continue with trainer.train(resume_from_checkpoint=True)" if checkpoint else ""
        super().__init__(f"{where}{saved}{resume}")
        self.checkpoint, self.step = checkpoint, step


HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopOnInterrupt(TrainerCallback):
    """Installs SIGINT/SIGTERM handlers for the length of training; save-and-stop on the first."""

    def __init__(self) -> None:
        self.requested = False
        self.stopped_at_step: int | None = None
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.requested = True
        for handled, previous in self._previous.items():  # a second signal acts at once
            signal.signal(handled, previous)
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        logger.warning("%s: saving a checkpoint at the end of this step, then stopping (again: abort)", name)

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopOnInterrupt]:
        """Handle the signals while the block runs (only in the main thread, where they arrive)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        self._previous = {handled: signal.signal(handled, self._on_signal) for handled in HANDLED_SIGNALS}
        try:
            yield self
        finally:
            for handled, previous in self._previous.items():
                signal.signal(handled, previous)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if any_rank(self.requested, args.device):
            self.requested = True
            self.stopped_at_step = state.global_step
            control.should_save = True  # whatever save_strategy says: --resume needs it
            control.should_training_stop = True
        return control
