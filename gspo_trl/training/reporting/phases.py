"""Where a run's time goes: seconds per phase, tokens per second, and MFU of the update phase.

The perf probe (gspo_trl.training.probes.perf) opens a phase around each piece of real work (the
trainer's events); `PhaseTimer` keeps the phases disjoint: opening one pauses the phase it is
nested in, and inside `heldout` or `checkpoint` everything counts to them. On CUDA every boundary
synchronizes, so a phase owns its kernels' run time. `other` is the window's wall time minus the
phases, so a window's phases sum to its `perf/wall_s`.

Throughput is tokens over (window wall seconds x processes), tokens counted over every process;
MFU is this process's update FLOPs (gspo_trl.model.sizing.flops, the count `gspo-trl plan` uses;
with `packing: true` over each row's own tokens) over (update seconds x the device's peak,
gspo_trl.model.sizing.flops.peak_tflops), 0-1. Each key, what it holds and the peers' formulas:
docs/performance.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from transformers import TrainerCallback

import gspo_trl.core.metric_names as names
from gspo_trl.core.errors import PlanError
from gspo_trl.model.sizing.flops import peak_tflops, training_flops_per_token, update_flops
from gspo_trl.model.sizing.shape import ModelShape, shape_from_config

logger = logging.getLogger(__name__)

ABSORBING = (names.PHASE_HELDOUT, names.PHASE_CHECKPOINT)
"""Phases that keep the time of the phases opened inside them."""


class PhaseTimer:
    """Seconds per phase since the last `window()`, phases disjoint (see the module docstring)."""

    def __init__(self, synchronize: bool = False) -> None:
        self.synchronize = synchronize
        self.totals: dict[str, float] = dict.fromkeys((*names.PHASES, names.PHASE_OTHER), 0.0)
        self.reset()

    def reset(self) -> None:
        """Start a fresh window now, with no phase open (a new `train()`, or after a raise);
        the run's totals restart too."""
        self.totals = dict.fromkeys(self.totals, 0.0)
        self._seconds: dict[str, float] = dict.fromkeys(names.PHASES, 0.0)
        self._stack: list[str] = []
        self._window_start = self._mark = time.perf_counter()

    @property
    def open_phases(self) -> tuple[str, ...]:
        """The phases open now, outermost first."""
        return tuple(self._stack)

    def _now(self) -> float:
        if self.synchronize:
            torch.cuda.synchronize()
        return time.perf_counter()

    def start(self, phase: str) -> None:
        if self._stack and self._stack[-1] in ABSORBING:
            self._stack.append(self._stack[-1])
            return
        now = self._now()
        if self._stack:
            self._seconds[self._stack[-1]] += now - self._mark
        self._stack.append(phase)
        self._mark = now

    def stop(self) -> None:
        phase = self._stack.pop()
        if self._stack and self._stack[-1] == phase and phase in ABSORBING:
            return
        now = self._now()
        self._seconds[phase] += now - self._mark
        self._mark = now

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.start(name)
        try:
            yield
        finally:
            self.stop()

    def window(self) -> dict[str, float]:
        """{phase: seconds, 'other': the rest, 'wall': the window} since the last call; resets."""
        now = self._now()
        if self._stack:  # a log from inside a phase: charge it so far, keep it open
            self._seconds[self._stack[-1]] += now - self._mark
            self._mark = now
        out = dict(self._seconds)
        wall = now - self._window_start
        out[names.PHASE_OTHER] = max(0.0, wall - sum(out.values()))
        for phase, seconds in out.items():
            self.totals[phase] += seconds
        self._seconds = dict.fromkeys(names.PHASES, 0.0)
        self._window_start = now
        return {**out, "wall": wall}


def trainer_model_shape(model: Any) -> ModelShape | None:
    """The FLOP model's shape of a live model (its config), or None when the config lacks a field."""
    config = getattr(model, "config", None)
    try:
        name = getattr(config, "name_or_path", "model")
        shape = shape_from_config(config.to_dict(), name, "the model's config")
    except (AttributeError, PlanError) as error:
        logger.warning("perf/mfu is not logged: %s", error)
        return None
    if getattr(
        model, "peft_config", None
    ):  # LoRA: a frozen base, counted as gspo_trl.model.sizing.flops says
        # Every trainable parameter is an adapter; a MoE's expert adapters all count, not only the
        # routed ones (an overcount of 6 x the unrouted adapters, small beside 4N).
        adapters = sum(p.numel() for p in model.parameters() if p.requires_grad)
        shape = dataclasses.replace(shape, lora_adapter_params=adapters)
    return shape


class PerfMeter:
    """The phase timer plus the token and FLOP counts of one process, turned into `perf/*` logs."""

    def __init__(self, device: torch.device, shape: ModelShape | None, gradient_checkpointing: bool) -> None:
        self.device, self.shape, self.gradient_checkpointing = device, shape, gradient_checkpointing
        self.timer = PhaseTimer(synchronize=device.type == "cuda")
        self.peak = peak_tflops(device)
        """(peak TFLOPS, its source) of this process's device (a CPU's measured here, once)."""
        self._zero_counts()

    def _zero_counts(self) -> None:
        self.generated_tokens = 0
        self.trained_tokens = torch.zeros((), dtype=torch.long, device=self.device)
        self.update_flops = 0.0

    def count_generated(self, completion_ids: list) -> None:
        self.generated_tokens += sum(len(ids) for ids in completion_ids)

    def count_update(self, inputs: dict[str, Any], packed: bool = False) -> None:
        """One minibatch a gradient is taken on: TRL's prepared inputs (prompt/completion ids, masks).
        `packed` (`packing: true`): its FLOPs over each row's own tokens, not the padded rectangle."""
        self.trained_tokens += inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()
        if self.shape is None:
            return
        if packed:  # the packing probe reads the row lengths on the host for its forward anyway
            lengths = (inputs["prompt_mask"].sum(dim=1) + inputs["completion_mask"].sum(dim=1)).tolist()
            for length, rows in sorted(Counter(lengths).items()):
                self.update_flops += update_flops(self.shape, rows, length, self.gradient_checkpointing)
            return
        rows, prompt = inputs["prompt_ids"].shape
        length = prompt + inputs["completion_ids"].shape[1]
        self.update_flops += update_flops(self.shape, rows, length, self.gradient_checkpointing)

    def logs(self, accelerator: Any) -> dict[str, float]:
        """The window's `perf/*` entries (a collective when there are several processes)."""
        window = self.timer.window()
        counts = torch.tensor([self.generated_tokens, self.trained_tokens.item()], device=self.device).float()
        if accelerator.num_processes > 1:
            counts = accelerator.reduce(counts, reduction="sum")
        generated, trained = counts.tolist()
        wall, processes = window["wall"], accelerator.num_processes
        out = {names.perf_seconds(phase): window[phase] for phase in (*names.PHASES, names.PHASE_OTHER)}
        out[names.PERF_WALL] = wall
        out[names.PERF_GENERATED_TOKENS] = generated
        out[names.PERF_TRAINED_TOKENS] = trained
        if wall > 0:
            out[names.PERF_TOKENS_PER_S] = generated / (wall * processes)
            out[names.PERF_TRAINED_TOKENS_PER_S] = trained / (wall * processes)
        update_s, peak = window[names.PHASE_UPDATE], self.peak[0]
        if self.shape is not None and peak and update_s > 0 and self.update_flops > 0:
            out[names.PERF_UPDATE_FLOPS] = self.update_flops
            out[names.PERF_MFU] = self.update_flops / (update_s * peak * 1e12)
        self._zero_counts()
        return out

    def totals(self) -> dict[str, float]:
        """`perf/total/*`: each phase's seconds summed over the run so far."""
        return {names.perf_total(phase): seconds for phase, seconds in self.timer.totals.items()}

    def ceiling_line(self, context_tokens: int) -> str:
        """The banner's perf line: the plan's FLOP count per token at `context_tokens` and the
        device's peak, as the update phase's tokens/s ceiling (the step line shows the run's)."""
        peak, source = self.peak
        if self.shape is None or not peak:
            return f"  perf     no MFU: {source}"
        flops = training_flops_per_token(self.shape, context_tokens, self.gradient_checkpointing)
        ceiling = peak * 1e12 / flops
        return (
            f"  perf     plan: at most {ceiling:,.0f} trained tok/s per process at 100% MFU "
            f"({flops:.3g} FLOPs/token, {peak:.3g} TFLOPS peak, {source})"
        )


class UpdatePhaseCallback(TrainerCallback):
    """Ends `setup` at `on_train_begin`; times `update` from `on_step_begin` to `on_step_end`,
    which transformers' `_run_epoch` calls around an optimizer step's `training_step`s,
    `_clip_grad_norm`, `optimizer.step()`, `lr_scheduler.step()` and `zero_grad()`; the
    generation TRL starts inside `training_step` (`_prepare_inputs`) pauses it."""

    def __init__(self, timer: PhaseTimer) -> None:
        self.timer = timer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.timer.open_phases[-1:] == (names.PHASE_SETUP,):  # opened by GSPOTrainer.train
            self.timer.stop()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if names.PHASE_UPDATE not in self.timer.open_phases:
            self.timer.start(names.PHASE_UPDATE)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.timer.open_phases[-1:] == (names.PHASE_UPDATE,):
            self.timer.stop()
