"""A progress bar over a trainer's optimizer steps, for tools whose stdout is their report.

`calibrate`, `check-logprobs` and the demo's warm start train for a while and then print a
result. The training console (one line per logging step) would bury that result in a pipe;
TRL's dict printing even more so. These tools show a bar on stderr instead (terminal only).
"""

from __future__ import annotations

from typing import Any

from transformers.trainer_callback import TrainerCallback

from gspo_trl.core.progress import progress_bar
from gspo_trl.training.reporting.console_lines import remove_console


class StepProgressBar(TrainerCallback):
    """A bar over `max_steps`, with the latest loss (or reward, when GSPO logs one) after it."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.bar: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if getattr(state, "is_world_process_zero", True):  # one bar per launch, not per rank
            self.bar = progress_bar(state.max_steps, self.desc, unit="step", initial=state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if self.bar is None or not logs:
            return
        shown = {k: f"{logs[k]:.3f}" for k in ("reward", "loss") if isinstance(logs.get(k), int | float)}
        if shown:
            self.bar.set_postfix(shown, refresh=False)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def show_steps_as_bar(trainer: Any, desc: str) -> StepProgressBar:
    """Take out every callback that prints per step (TRL's, and our console); add a
    StepProgressBar. metrics.jsonl is still written; the diagnostics' warnings still log."""
    remove_console(trainer)
    bar = StepProgressBar(desc)
    trainer.add_callback(bar)
    return bar
