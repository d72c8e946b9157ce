"""What a training run prints, and the full metrics it writes next to the model.

TRL prints each logging step as a dict of 60+ keys. A GSPO run prints instead, on the main
process only: a start banner (model, data, rewards, GSPO settings, the engine capabilities, world
size, output dir), one line per log (step, rewards, held-out score, off-policy clip fraction,
spread of log s_i, what the probes add, seconds/step, ETA), an end summary (each phase's share
and token rates, run_summary), and `!` alarm lines (each probe's `alarm_loggers`, groups that all
have zero variance, a reward that scores every completion alike, reward_watch).

Every key of every log event still goes to the trackers in `report_to` and, always, to
OUTPUT_DIR/metrics.jsonl (one JSON object per event, with its `step`), which `gspo-trl report`
reads. What a probe declares (its alarm loggers): docs/probes.md.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

import gspo_trl.core.metric_names as names
from gspo_trl.config.batch import RolloutBatch
from gspo_trl.core.progress import duration
from gspo_trl.training.reporting.line_parts import (
    BANNER_GSPO,
    BANNER_RUN,
    STEP_HELDOUT,
    STEP_SECONDS,
    LinePart,
)
from gspo_trl.training.reporting.reward_watch import ConstantRewardWatch, reward_means_part
from gspo_trl.training.reporting.run_summary import RunTotals, summary_lines

logger = logging.getLogger(__name__)

HELDOUT_LOGGER = "gspo_trl.training.heldout.scoring"
"""Its INFO lines repeat the held-out score the console already prints; they are held back."""
ZERO_VARIANCE_STEPS = 3
"""Consecutive logging steps with every group tied (zero variance) before the console warns."""

ZERO_VARIANCE_KEY = names.ZERO_VARIANCE_GROUPS
HELDOUT_KEY = names.HELDOUT_SCORE


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not math.isnan(value) else None


def step_line(
    logs: dict[str, Any],
    step: int,
    max_steps: int,
    seconds_per_step: float | None,
    heldout: float | None = None,
    eta_seconds: float | None = None,
    last_reward: dict[str, Any] | None = None,
    probes: Iterable[Any] = (),
) -> str:
    """One training log event as a compact line; fields that were not logged are left out.

    `seconds_per_step` is over the last logging interval; the ETA defaults to it times the
    steps left (the console passes one from the average since the first step instead).
    `last_reward` (the `reward`, `reward_std` and `step` of the last event that logged a
    reward) is shown, marked with its step, when this event has none: TRL logs the reward
    once per rollout batch (see ConsoleCallback). `probes` add their parts (`step_line_parts`:
    clip, expert flips, staleness, w_i, keep rate, tok/s ...), each at its place.
    """
    width = len(str(max_steps))
    parts = [LinePart(0, f"step {step:>{width}}/{max_steps}")]
    reward, carried, reward_logs = _number(logs.get("reward")), None, logs
    if reward is None and last_reward is not None:  # the rest of the line is still this event's
        reward, reward_logs, carried = last_reward["reward"], last_reward, last_reward["step"]
    if reward is not None:
        std = _number(reward_logs.get("reward_std"))
        each = reward_means_part(reward_logs)  # each reward's mean, with two or more
        text = (
            f"reward {reward:.3f}"
            + (f" ±{std:.2f}" if std is not None else "")
            + (f" {each}" if each else "")
            + (f" (rollout of step {carried})" if carried is not None else "")
        )
        parts.append(LinePart(STEP_HELDOUT - 10, text))
    if heldout is not None:
        parts.append(LinePart(STEP_HELDOUT, f"held-out {heldout:.3f}"))
    for probe in probes:
        parts += probe.step_line_parts(logs)
    if seconds_per_step is not None:
        parts.append(LinePart(STEP_SECONDS, f"{seconds_per_step:.2f} s/step"))
    if eta_seconds is None and seconds_per_step is not None:
        eta_seconds = seconds_per_step * max(0, max_steps - step)
    if eta_seconds is not None:
        parts.append(LinePart(STEP_SECONDS + 10, f"ETA {duration(eta_seconds)}"))
    return " | ".join(part.text for part in sorted(parts, key=lambda part: part.place))


def model_line(model_name: str, lora: Any = None) -> str:
    """The banner's model: its name or path, and LoRA's rank, alpha and target modules (a
    peft.LoraConfig, None for full fine-tuning); another PEFT method (prompt tuning, IA3...)
    by its peft_type, since TRL takes any PeftConfig."""
    if lora is None:
        return f"{model_name}, full fine-tuning"
    if not hasattr(lora, "lora_alpha"):
        kind = getattr(lora, "peft_type", None)
        return f"{model_name}, PEFT {getattr(kind, 'value', kind) or type(lora).__name__}"
    targets = lora.target_modules
    targets = targets if isinstance(targets, str) or targets is None else ", ".join(sorted(targets))
    return f"{model_name}, LoRA rank {lora.r} (alpha {lora.lora_alpha:g}) on {targets or 'peft defaults'}"


def banner(trainer: Any, model_name: str, reward_names: list[str], eval_rows: int) -> str:
    """The lines printed once before training: what is trained, on what, how, and where."""
    args = trainer.args
    lora = (getattr(trainer.model, "peft_config", None) or {}).get("default")
    rows = trainer.train_dataset
    train_rows = "streaming" if rows is not None and not hasattr(rows, "__len__") else len(rows or ())
    level = getattr(trainer, "importance_sampling_level", "?")
    eps = f"eps {trainer.epsilon_low:g}/{trainer.epsilon_high:g}"
    algorithm = "GSPO-token" if getattr(trainer, "gspo_token", False) else f"{level}-level ratio"
    length = f"{args.max_steps} steps" if args.max_steps > 0 else f"{args.num_train_epochs:g} epoch(s)"
    held_out = f", {eval_rows} held-out" if eval_rows else ""
    lines = [
        LinePart(0, "gspo-trl: training"),
        LinePart(10, f"  model    {model_line(model_name, lora)}"),
        LinePart(20, f"  data     {train_rows} training rows{held_out}"),
        LinePart(30, f"  rewards  {', '.join(reward_names)}"),
        LinePart(
            BANNER_GSPO,
            f"  GSPO     {algorithm}, {eps}, {args.num_generations} per group, "
            f"{RolloutBatch.from_grpo_config(args).optimizer_updates} updates per rollout batch, "
            f"beta {args.beta:g}, "
            f"lr {args.learning_rate:g}",
        ),
        LinePart(
            BANNER_RUN,
            f"  run      {length} on {trainer.accelerator.num_processes} process(es), "
            f"logging every {args.logging_steps:g}, output {args.output_dir}",
        ),
        *(part for probe in getattr(trainer, "probes", ()) for part in probe.banner_lines(trainer)),
    ]
    return "\n".join(line.text for line in sorted(lines, key=lambda line: line.place))


class _AlarmFilter(logging.Filter):
    """Shows the ClipAlarm's warnings as `!` lines instead of timestamped log records."""

    def __init__(self, console: ConsoleCallback) -> None:
        super().__init__()
        self.console = console

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        self.console.alarm(record.getMessage())
        return False


class _QuietInfo(logging.Filter):
    """Drops INFO records (warnings pass): for loggers whose news the console already prints."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


class ConsoleCallback(TrainerCallback):
    """Prints the banner, one line per logging step and `!` alarms, on the main process.

    TRL records the reward once per rollout batch, in `_generate_and_score_completions`
    (trl 1.16, trl/trainer/grpo_trainer.py:2828-2829):

        self._metrics[mode]["reward"].append(torch.nanmean(rewards).item())
        self._metrics[mode]["reward_std"].append(nanstd(rewards).item())

    which `_prepare_inputs` calls only when `self._step % generate_every == 0` (line 1539,
    `generate_every = self.args.steps_per_generation * self.num_iterations`), and `log`
    empties the metrics after each logging step (`self._metrics[mode].clear()`, line 3321).
    So with `logging_steps` below the optimizer steps per rollout batch, the logging steps
    between two rollouts carry no `reward` key: their line shows the last one, marked
    "(rollout of step N)". metrics.jsonl keeps what TRL logged.
    """

    def __init__(
        self, header: str, printer: Any = print, alarm_loggers: Sequence[str] = (), probes: Iterable[Any] = ()
    ) -> None:
        """`alarm_loggers`: whose warnings print as `!` lines (each probe's `alarm_loggers`);
        `probes`: whose `step_line_parts` the step line shows (the trainer's chain)."""
        self.header, self.printer, self.probes = header, printer, probes
        self.alarms: list[str] = []
        self._last_time: float | None = None
        self._last_step = 0
        self._start: tuple[float, int] | None = None
        self._printed_step = -1
        self._pending_heldout: dict[str, Any] | None = None
        self._zero_streak = 0
        self._last_reward: dict[str, Any] | None = None
        self._constant_rewards = ConstantRewardWatch()
        self._run_totals = RunTotals()
        self._ending: list[str] = []
        self._filters: dict[str, logging.Filter] = {name: _AlarmFilter(self) for name in alarm_loggers}
        self._filters[HELDOUT_LOGGER] = _QuietInfo()

    def _print(self, text: str) -> None:
        self.printer(text, flush=True)

    def alarm(self, message: str) -> None:
        self.alarms.append(message)
        self._print(f"! {message}")

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self._print(self.header)
        self._start = None
        self._run_totals = RunTotals()
        for name, log_filter in self._filters.items():
            alarm_logger = logging.getLogger(name)
            # A logging config applied earlier in the process (dictConfig disables existing
            # loggers by default; a library may raise levels) must not silence GSPO's alarms.
            alarm_logger.disabled = False
            if alarm_logger.getEffectiveLevel() > logging.WARNING:
                alarm_logger.setLevel(logging.WARNING)
            # A run that raised never reached on_train_end, so its console's filter is still
            # attached and would swallow this run's alarms first: one console owns them.
            for stale in [f for f in alarm_logger.filters if isinstance(f, _AlarmFilter | _QuietInfo)]:
                alarm_logger.removeFilter(stale)
            alarm_logger.addFilter(log_filter)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._start is None:  # timing starts here, after any evaluation before training
            self._start = (time.monotonic(), state.global_step)
            self._last_time, self._last_step = self._start

    def close(self) -> None:
        """The run is over, every callback's on_train_end included: print its end lines (the
        Trainer logs `train_runtime` before on_train_end, where the final held-out score is
        measured) and let go of the alarm loggers."""
        ending, self._ending = self._ending, []
        for line in ending:
            self._print(line)
        for name, log_filter in self._filters.items():
            logging.getLogger(name).removeFilter(log_filter)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        step = state.global_step
        if HELDOUT_KEY in logs and "loss" not in logs:
            if step in (0, self._printed_step) or step >= state.max_steps:  # no training line follows
                self._print(self._heldout_line(logs, step, state.max_steps))
            else:
                self._pending_heldout = {**logs, "step": step}
            return
        if "train_runtime" in logs:  # printed by close(): the final held-out score comes first
            self._ending = [f"done: {step} steps in {duration(logs['train_runtime'])}"]
            self._ending += summary_lines(logs, self._run_totals, args.world_size)  # where the time went
            return
        if "loss" not in logs:  # an evaluation or a custom log: metrics.jsonl and trackers have it
            return
        self._run_totals.add(logs)
        now = time.monotonic()
        interval = None
        if self._last_time is not None and step > self._last_step:
            interval = (now - self._last_time) / (step - self._last_step)
        start_time, start_step = self._start or (now, step)
        average = (now - start_time) / (step - start_step) if step > start_step else None
        eta = average * max(0, state.max_steps - step) if average is not None else None
        self._last_time, self._last_step = now, step
        pending, self._pending_heldout = self._pending_heldout, None
        if pending and pending["step"] != step:  # measured between logging steps: its own line
            self._print(self._heldout_line(pending, pending["step"], state.max_steps))
            pending = None
        heldout = _number(pending.get(HELDOUT_KEY)) if pending else None
        carried = None
        if _number(logs.get("reward")) is not None:
            means = {k: v for k, v in logs.items() if k.startswith(f"{names.TRL_REWARDS}/")}
            self._last_reward = {
                **means,
                "reward": logs["reward"],
                "reward_std": logs.get("reward_std"),
                "step": step,
            }
        else:
            carried = self._last_reward
        self._print(step_line(logs, step, state.max_steps, interval, heldout, eta, carried, self.probes))
        self._printed_step = step
        self._check_zero_variance(logs)
        for message in self._constant_rewards.update(logs):
            self.alarm(message)

    def _heldout_line(self, logs: dict[str, Any], step: int, max_steps: int) -> str:
        extras = [
            f"{k.split('/', 1)[1]} {v:.3f}" for k, v in logs.items() if k.startswith(names.HELDOUT_PASS_AT)
        ]
        score = _number(logs.get(HELDOUT_KEY))
        text = f"{score:.3f}" if score is not None else "n/a"
        return " | ".join([f"step {step}/{max_steps}", f"held-out {text}", *extras])

    def _check_zero_variance(self, logs: dict[str, Any]) -> None:
        zero = _number(logs.get(ZERO_VARIANCE_KEY))
        self._zero_streak = self._zero_streak + 1 if zero is not None and zero >= 1.0 else 0
        if self._zero_streak == ZERO_VARIANCE_STEPS:
            self.alarm(
                f"every group had zero reward variance for {ZERO_VARIANCE_STEPS} logging steps: the "
                "advantages are all 0 and nothing is learned. The task is too easy or too hard for "
                "the model: change the data (`gspo-trl filter`), the reward, or num_generations."
            )


def remove_trl_printing(trainer: Any) -> None:
    """TRL's dict printing and its progress bar (or notebook table)."""
    for callback in list(trainer.callback_handler.callbacks):
        if isinstance(callback, PrinterCallback | ProgressCallback) or type(callback).__name__ == (
            "NotebookProgressCallback"
        ):
            trainer.callback_handler.remove_callback(callback)


def remove_console(trainer: Any) -> None:
    """Take out every callback that prints per step, TRL's and the console (the metrics file
    stays): for tools that show a bar instead."""
    remove_trl_printing(trainer)
    for callback in list(trainer.callback_handler.callbacks):
        if isinstance(callback, ConsoleCallback):
            trainer.callback_handler.remove_callback(callback)
