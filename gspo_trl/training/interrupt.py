"""Ctrl-C during training: finish the current step, save a checkpoint, stop cleanly.

The first SIGINT only raises a flag; `StopOnInterrupt` sees it at the end of the optimizer
step and asks the Trainer to save a checkpoint and stop, so `gspo-trl train --resume`
continues from exactly there. The second SIGINT restores Python's default handling and
interrupts at once (KeyboardInterrupt, no checkpoint). Under a multi-process launch every
rank gets the signal (the terminal sends it to the whole process group), maybe in different
steps: the flag is reduced across ranks at each step end (one scalar), so all ranks save
and stop at the same step instead of waiting on each other forever.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C after saving `checkpoint` (None when nothing was saved)."""

    def __init__(self, checkpoint: str | None) -> None:
        super().__init__(checkpoint)
        self.checkpoint = checkpoint


class StopOnInterrupt(TrainerCallback):
    """Installs the SIGINT handler for the length of training; save-and-stop on the first."""

    def __init__(self) -> None:
        self.requested = False
        self.stopped_at_step: int | None = None

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C aborts at once
        logger.warning("Ctrl-C: saving a checkpoint at the end of this step, then stopping (again to abort)")

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopOnInterrupt]:
        """Handle SIGINT while the block runs (only in the main thread, where signals arrive)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if _any_rank(self.requested, args):
            self.requested = True
            self.stopped_at_step = state.global_step
            control.should_save = True  # whatever save_strategy says: --resume needs it
            control.should_training_stop = True
        return control


def _any_rank(flag: bool, args: Any) -> bool:
    """True when any process of the launch has the flag set (the flag itself when alone)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=args.device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
