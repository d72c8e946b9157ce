"""Stop a run whose numbers stopped being numbers, before it saves them over anything.

`StopOnNonFinite` checks the trainable weights (min and max of each parameter, one sync; the local
shard under FSDP or ZeRO-3, any rank's failure stops all) at the end of every optimizer step that
will save (a checkpoint, an epoch's, Ctrl-C's, the last step's before `save_model`), before the
Trainer's `_maybe_log_save_evaluate` can (transformers/trainer.py:1882-1884), and every
`SCAN_EVERY_STEPS` steps between; and the loss and grad norm of every logging event (`on_log`,
before that event's save). It raises `NonFiniteTrainingError` (a
UserError: one line, exit 2) naming the step and the last complete checkpoint, which stays as it
was: `--resume` with a lower learning rate continues from there. Why transformers alone does not
stop: docs/probes.md ("NonFiniteProbe"). Under fp16 a loss-scaler-skipped step (inf grad norm,
weights untouched) is not divergence; too many in a row is (`MAX_SKIPPED_STEPS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback

from gspo_trl.core.errors import NonFiniteTrainingError
from gspo_trl.core.ranks import any_rank
from gspo_trl.model.loading.checkpoints import latest_checkpoint
from gspo_trl.training.probes.base import Probe, ProbeCallbacks

WATCHED_LOGS = ("loss", "grad_norm")
"""Logged values that must stay finite (both are what the optimizer step just used)."""
MAX_SKIPPED_STEPS = 16
"""Consecutive optimizer steps a loss scaler (fp16) may skip before the run is stopped. GradScaler
skips a step whose gradients are not finite, leaving the weights as they were, and halves its
scale (`scaler.step` then `scaler.update`, accelerate/optimizer.py:171-180); the Trainer still
logs the step's inf grad norm. From the initial scale 2**16 (torch/amp/grad_scaler.py:126,
`backoff_factor` 0.5) 16 halvings reach 1, so a 17th overflow is a gradient inf unscaled. A skip
is read from the scale going down, not accelerate's `step_was_skipped`: with a fused AdamW
(transformers' default `adamw_torch_fused`) the scaler hands the skip to the optimizer itself
(`if getattr(optimizer, "_step_supports_amp_scaling", False)`, grad_scaler.py:418), so accelerate
always reports a step. DeepSpeed's fp16 loss scale skips alike; there the grad norm is excused
under `fp16`."""
SCAN_EVERY_STEPS = 8
"""Steps between weight scans on steps that do not save: a backstop that stops a diverged run
early. The guarantee (no save after non-finite weights) rests on the scan of every saving step;
the scan is 0.6 ms of a 50 ms tiny step, which was 30% of the trainer's overhead over GRPOTrainer."""


class StopOnNonFinite(TrainerCallback):
    """Raises NonFiniteTrainingError at the first step whose weights, loss or grad norm is inf/NaN."""

    def __init__(self) -> None:
        self.skipped_in_a_row = 0
        """Optimizer steps the loss scaler skipped since the last applied one (fp16 only)."""
        self._scale: float | None = None
        self._watched: tuple[Any, list[Any]] | None = None
        """(model, its trainable parameters): listed at the first step of each `train()`, after
        accelerate's `prepare` (which may shard them), not walked again every step."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.skipped_in_a_row, self._scale = 0, loss_scale(kwargs.get("optimizer"))
        self._watched = None
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        scale = loss_scale(kwargs.get("optimizer"))
        skipped = scale is not None and self._scale is not None and scale < self._scale
        self._scale = scale
        self.skipped_in_a_row = self.skipped_in_a_row + 1 if skipped else 0
        if self.skipped_in_a_row > MAX_SKIPPED_STEPS:
            raise _stopped(
                args,
                state.global_step,
                f"the fp16 loss scaler skipped {self.skipped_in_a_row} optimizer steps in a row (the "
                "gradients overflow even at a loss scale of 1)",
            )
        saves = control.should_save or control.should_training_stop or state.global_step >= state.max_steps
        if saves or state.global_step % SCAN_EVERY_STEPS == 0:
            self._scan(args, state, model)
        return control

    def on_epoch_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        if control.should_save:  # save_strategy "epoch" decides here, after the step's on_step_end
            self._scan(args, state, model)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        self._scan(args, state, model)  # before `save_model` after `train()`, whatever stopped it
        return control

    def _scan(self, args: Any, state: Any, model: Any) -> None:
        if model is not None and any_rank(not weights_finite(model, self._parameters(model)), args.device):
            raise _stopped(args, state.global_step, "the weights hold inf or NaN")

    def _parameters(self, model: Any) -> list[Any]:
        if self._watched is None or self._watched[0] is not model:
            self._watched = (model, trainable_parameters(model))
        return self._watched[1]

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any):
        bad = [
            f"{key} {value}"
            for key, value in (logs or {}).items()
            if key in WATCHED_LOGS
            and isinstance(value, int | float)
            and not math.isfinite(value)
            and not (key == "grad_norm" and (self.skipped_in_a_row or args.fp16))  # a skipped step
        ]
        if bad:  # logs are the same on every rank (the Trainer gathers them first)
            raise _stopped(args, state.global_step, ", ".join(bad))
        return control


def loss_scale(optimizer: Any) -> float | None:
    """The loss scaler's scale (GradScaler, on accelerate's optimizer wrapper); None without one.
    Read before the first step it is the initial scale (`get_scale`, grad_scaler.py)."""
    scaler = getattr(optimizer, "scaler", None)
    return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else None


def trainable_parameters(model: Any) -> list[Any]:
    """The parameters `weights_finite` scans: those the optimizer may change."""
    return [parameter for parameter in model.parameters() if parameter.requires_grad]


def weights_finite(model: Any, parameters: Sequence[Any] | None = None) -> bool:
    """True when every trainable parameter (the local shard under FSDP/ZeRO-3) is finite.
    `parameters`: `trainable_parameters(model)`, when the caller keeps the list."""
    import torch

    peaks = []
    with torch.no_grad():
        for parameter in trainable_parameters(model) if parameters is None else parameters:
            local = getattr(parameter, "ds_tensor", None)  # DeepSpeed ZeRO-3 keeps the shard here
            local = local if local is not None else parameter
            local = local.to_local() if hasattr(local, "to_local") else local  # FSDP2 DTensor
            if local.numel():
                # min and max (NaN propagates through both; -inf shows in the min): one pass over
                # the weights, 7x cheaper on CPU than an inf-norm per tensor, the same verdict
                peaks += torch.aminmax(local)
    if not peaks:
        return True
    device, dtype = peaks[0].device, peaks[0].dtype
    if any(peak.device != device or peak.dtype != dtype for peak in peaks):  # mixed: one float32 vector
        peaks = [peak.float().to(device) for peak in peaks]
    return bool(torch.isfinite(torch.stack(peaks)).all())  # one sync for the whole model


def _stopped(args: Any, step: int, what: str) -> NonFiniteTrainingError:
    kept = latest_checkpoint(args.output_dir)
    where = f"{kept} is kept as it was" if kept else "no checkpoint was saved before it"
    return NonFiniteTrainingError(
        f"training diverged at step {step}: {what}; nothing of it was saved ({where}). Lower "
        f"learning_rate (now {args.learning_rate:g}) or max_grad_norm, then --resume from the last "
        "checkpoint or --overwrite to start again"
    )


class NonFiniteProbe(Probe):
    """StopOnNonFinite as one of GSPOTrainer's built-in probes: its callback runs after
    transformers' own and the trackers', so the step's log reaches them before the run stops."""

    def callbacks(self) -> ProbeCallbacks:
        return ProbeCallbacks(after_reporting=[StopOnNonFinite()])
