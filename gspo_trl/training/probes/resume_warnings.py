"""What a resume says: that it regenerates the rest of a rollout batch when the checkpoint
fell inside one, and not the one expected warning (missing tied copies of the embeddings);
and the logging, eval and save intervals it was given, applied (`IntervalsFromArgs`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from transformers import TrainerCallback

from gspo_trl.config.batch import RolloutBatch
from gspo_trl.training.probes.base import Probe, ProbeCallbacks


def mid_batch_resume_note(batch: RolloutBatch, global_step: int) -> str | None:
    """The line a resume prints when `global_step` is not at a rollout-batch boundary: how many
    optimizer steps of the interrupted batch are trained on a freshly generated batch; None at a
    boundary (an exact resume)."""
    done = batch.steps_into_rollout_batch(global_step)
    if done == 0:
        return None
    updates = batch.optimizer_updates
    return (
        f"step {global_step} is {_count(done)} of the {_count(updates)} optimizer steps of a rollout batch: "
        f"its last {_count(updates - done)} step(s) are regenerated (a fresh rollout batch from the resumed "
        "weights; the rest of the old one lived in memory only). save_steps a multiple of "
        f"{_count(updates)} resumes exactly."
    )


def _count(steps: Fraction) -> str:
    return str(steps.numerator) if steps.denominator == 1 else f"{float(steps):g}"


class IntervalsFromArgs(TrainerCallback):
    """Apply this launch's logging_steps, eval_steps and save_steps on a resume.

    The Trainer sets them on its state from the arguments (`self.state.compute_steps(self.args,
    max_steps)`, transformers/trainer.py:1631), then on a resume replaces the whole state with
    the checkpoint's (`self.state = TrainerState.load_from_json(...)`, trainer.py:1639), whose
    intervals are the old run's; `compare_trainer_and_checkpoint_args`
    (transformers/trainer_utils.py:1133) only warns, and DefaultFlowCallback decides by the
    state's (`state.global_step % state.logging_steps == 0`, transformers/trainer_callback.py:572).
    run_dir calls these keys fine to change on a resume: this makes them so, at train begin
    (after the state is loaded)."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        state.compute_steps(args, state.max_steps)
        return control


class ResumeIntervalsProbe(Probe):
    """IntervalsFromArgs as a built-in probe: a resumed GSPOTrainer, from a recipe or from Python,
    logs, evaluates and saves at the intervals it was given."""

    def callbacks(self) -> ProbeCallbacks:
        return ProbeCallbacks(after_reporting=[IntervalsFromArgs()])


MISSING_KEYS_PREFIX = "There were missing keys in the checkpoint model loaded: "


class TiedWeightsFilter(logging.Filter):
    """Drops transformers' "missing keys ['lm_head.weight']" warning on resume, and only it.

    A model with tied embeddings saves the shared matrix once, so its checkpoint lacks the
    tied copies by design; the Trainer still warns (its ignore list is empty for these
    models). Any other missing key is a real problem and passes through.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        config = getattr(model, "config", None)
        tied = getattr(model, "_tied_weights_keys", None) or {}
        self.tied = set(tied) if getattr(config, "tie_word_embeddings", False) else set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(MISSING_KEYS_PREFIX) or not self.tied:
            return True
        import ast

        try:
            missing = ast.literal_eval(message[len(MISSING_KEYS_PREFIX) :].rstrip("."))
        except (ValueError, SyntaxError):
            return True
        # PEFT and DDP wrappers prefix the names (base_model.model.lm_head.weight)
        return not all(any(key == t or key.endswith("." + t) for t in self.tied) for key in missing)


@contextlib.contextmanager
def quiet_tied_weights_warning(model: Any) -> Iterator[TiedWeightsFilter]:
    """TiedWeightsFilter on transformers' trainer logger for the duration of the block."""
    log_filter = TiedWeightsFilter(model)
    trainer_logger = logging.getLogger("transformers.trainer")
    trainer_logger.addFilter(log_filter)
    try:
        yield log_filter
    finally:
        trainer_logger.removeFilter(log_filter)
