"""The console a run prints (one short line per logging step, `!` alarms) and metrics.jsonl."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections import DiagnosticsConfig
from gspo_trl.diagnose import report
from gspo_trl.training.build import build_trainer, train_recipe
from gspo_trl.training.probes.diagnostics import ClipAlarm
from gspo_trl.training.reporting.console_lines import (
    ZERO_VARIANCE_STEPS,
    ConsoleCallback,
    model_line,
    step_line,
)
from gspo_trl.training.reporting.metrics_file import METRICS_FILE
from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)
from tests._paths import ROOT
from tests.training.reporting._line_probes import line_probes

TINY_RECIPE = ROOT / "recipes" / "tiny" / "reversal.yaml"
MAX_LINE = 200
CLIP = (ClipAlarm.__module__,)
"""The clip-rate alarm's logger, as DiagnosticsProbe declares it to the console."""

FULL_LOGS = {
    "reward": 0.123456,
    "reward_std": 0.4567,
    "gspo/offpolicy/clip/region": 0.123,
    "gspo/offpolicy/log_ratio/std": 1.234e-3,
    "gspo/zero_variance_groups": 0.25,
    **{f"gspo/mb{k}/log_ratio/p{q}": 0.1 for k in range(1, 9) for q in (5, 50, 95)},
}


@pytest.mark.parametrize(
    ("logs", "step", "max_steps", "seconds", "heldout", "expected", "absent"),
    [
        (
            FULL_LOGS,
            123456,
            999999,
            12.5,
            0.875,
            ["123456/999999", "reward 0.123", "held-out 0.875", "clip 12.3%", "log s std 1.2e-03"],
            [],
        ),
        ({"loss": 0.0, "reward": 1.0}, 3, 10, None, None, ["step  3/10", "reward 1.000"], ["ETA", "clip"]),
        ({"loss": 0.0, "gspo/zero_variance_groups": 1.0}, 5, 5, 2.0, None, ["zero-var 100%", "ETA 0s"], []),
        ({"loss": 0.0}, 1, 100, 75.0, None, ["ETA 2h03m"], ["reward"]),
    ],
)
def test_step_line_is_short_and_shows_what_was_logged(
    logs, step, max_steps, seconds, heldout, expected, absent
) -> None:
    line = step_line(logs, step, max_steps, seconds, heldout, probes=line_probes())
    assert len(line) < MAX_LINE and "\n" not in line, line
    for text in expected:
        assert text in line, (text, line)
    for text in absent:
        assert text not in line, (text, line)


def _callback_run(console: ConsoleCallback, log_events: list[dict]) -> None:
    """Drive a real ConsoleCallback through begin, one log per step, and end."""
    args = TrainingArguments(output_dir="unused", report_to="none")
    state, control = TrainerState(max_steps=len(log_events)), TrainerControl()
    console.on_train_begin(args, state, control)
    for step, logs in enumerate(log_events, start=1):
        console.on_step_begin(args, state, control)
        state.global_step = step
        console.on_log(args, state, control, logs=logs)
    console.on_train_end(args, state, control)
    console.close()


@pytest.mark.parametrize(
    ("zero_variance", "alarms"),
    [
        ([1.0] * ZERO_VARIANCE_STEPS, 1),
        ([1.0] * (ZERO_VARIANCE_STEPS + 3), 1),  # once, not every step after
        ([1.0] * (ZERO_VARIANCE_STEPS - 1) + [0.5] + [1.0] * (ZERO_VARIANCE_STEPS - 1), 0),
        ([0.9] * 10, 0),
    ],
)
def test_zero_variance_for_several_steps_raises_an_alarm(zero_variance, alarms) -> None:
    printed: list[str] = []
    console = ConsoleCallback(
        "banner", printer=lambda text, flush: printed.append(text), probes=line_probes()
    )
    _callback_run(console, [{"loss": 0.0, "gspo/zero_variance_groups": z} for z in zero_variance])
    assert len(console.alarms) == alarms
    assert sum(line.startswith("! ") and "zero reward variance" in line for line in printed) == alarms


def test_steps_between_rollouts_show_the_last_reward_marked_as_such() -> None:
    """TRL logs `reward` once per rollout batch: with logging_steps 1 and 4 updates per rollout
    batch, three step lines in four had no reward at all."""
    printed: list[str] = []
    console = ConsoleCallback(
        "banner", printer=lambda text, flush: printed.append(text), probes=line_probes()
    )
    update_only = {"loss": 0.0, "gspo/offpolicy/clip/region": 0.125}  # its own clip, no reward
    rollout = [{"loss": 0.0, "reward": 0.5, "reward_std": 0.25}] + [update_only] * 3
    _callback_run(console, [*rollout, {"loss": 0.0, "reward": 0.75, "reward_std": 0.1}, {"loss": 0.0}])
    lines = [line for line in printed if line.startswith("step ")]
    assert "reward 0.500 ±0.25 |" in lines[0] and "rollout of" not in lines[0]
    assert all("reward 0.500 ±0.25 (rollout of step 1)" in line for line in lines[1:4]), lines
    assert all("clip 12.5%" in line for line in lines[1:4]), lines  # the rest is the line's own
    assert "reward 0.750 ±0.10 |" in lines[4] and "reward 0.750 ±0.10 (rollout of step 5)" in lines[5]


@pytest.fixture
def logging_as_configured_by_nobody():
    """Earlier tests in the session may leave logging switched off process-wide (a library's
    `logging.disable` left set); the alarm tests start from logging's defaults."""
    logging.disable(logging.NOTSET)
    yield


@pytest.mark.usefixtures("logging_as_configured_by_nobody")
def test_clip_alarm_prints_a_bang_line_instead_of_a_log_record(caplog: pytest.LogCaptureFixture) -> None:
    printed: list[str] = []
    console = ConsoleCallback(
        "banner", printer=lambda text, flush: printed.append(text), probes=line_probes(), alarm_loggers=CLIP
    )
    config = DiagnosticsConfig(warn_after_steps=2)
    alarm = ClipAlarm(config)
    args = TrainingArguments(output_dir="unused", report_to="none")
    state, control = TrainerState(max_steps=4), TrainerControl()
    with caplog.at_level(logging.INFO):
        console.on_train_begin(args, state, control)
        for _ in range(2):
            alarm.update({"clip/pos_adv": 0.9, "clip/region": 0.8}, 3e-4, 4e-4)
        console.close()
        ClipAlarm(config).update({"clip/region": 0.0}, 3e-4, 4e-4)  # after close: ordinary logging
    bangs = [line for line in printed if line.startswith("! GSPO: off-policy minibatches clipped")]
    assert len(bangs) == 1, printed
    assert not [r for r in caplog.records if "clipped" in r.getMessage() and r.levelno >= logging.WARNING]


@pytest.mark.usefixtures("logging_as_configured_by_nobody")
def test_engine_mismatch_warning_is_a_bang_line(caplog: pytest.LogCaptureFixture) -> None:
    """The engine log-prob guard's warning (engine.on_mismatch: warn / recompute) stands out too."""
    from gspo_trl.training.probes import old_logprobs as engine_logprobs
    from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe

    printed: list[str] = []
    console = ConsoleCallback(
        "banner", lambda text, flush: printed.append(text), EngineLogprobsProbe.alarm_loggers
    )
    args = TrainingArguments(output_dir="unused", report_to="none")
    state, control = TrainerState(max_steps=4), TrainerControl()
    with caplog.at_level(logging.INFO):
        console.on_train_begin(args, state, control)
        engine_logprobs.logger.warning("engine.old_logprobs: engine: vLLM and the trainer disagree")
        console.close()
    assert printed[1:] == ["! engine.old_logprobs: engine: vLLM and the trainer disagree"], printed
    assert not [r for r in caplog.records if "disagree" in r.getMessage()]


@pytest.mark.slow
def test_four_step_run_prints_short_lines_and_writes_every_key(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    fast = {"max_steps": 4, "per_device_train_batch_size": 8, "num_generations": 4}
    fast.update({"max_completion_length": 8, "data.num_rows": 64, "data.eval_size": 8, "logging_steps": 1})
    fast.update({"steps_per_generation": 8, "gradient_accumulation_steps": 2})  # 8 micro-batches, 4 updates
    trainer = train_recipe(load_recipe(TINY_RECIPE, {**fast, "output_dir": str(tmp_path)}))
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "  model    tiny, full fine-tuning" in lines, out
    assert "4 updates per rollout batch" in out, out
    assert "56 training rows, 8 held-out" in out and "eps 0.02/0.027" in out
    step_lines = [line for line in lines if line.startswith("step ") and "s/step" in line]
    assert len(step_lines) == 4, out
    assert [line.split("/")[0] for line in step_lines] == [f"step {i}" for i in range(1, 5)]
    assert "reward " in step_lines[0] and "rollout of" not in step_lines[0]  # one rollout, 4 updates
    assert all("(rollout of step 1)" in line for line in step_lines[1:]), step_lines
    assert "held-out 0.000" in out and "ETA" in step_lines[-1]
    last_heldout = max(i for i, line in enumerate(lines) if line.startswith("step 4/4 | held-out"))
    assert last_heldout < lines.index(next(line for line in lines if line.startswith("done: "))), out
    assert all(len(line) < MAX_LINE for line in lines), max(lines, key=len)
    assert "{'loss'" not in out and "'gspo/" not in out  # TRL's dict printing is gone

    events = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    history = trainer.state.log_history
    assert len(events) == len(history)
    for event, entry in zip(events, history, strict=True):
        assert set(event) == set(entry), set(entry) ^ set(event)
        assert event["step"] == entry["step"]
    keys = {key for event in events for key in event}
    assert {"gspo/offpolicy/clip/region", "gspo/offpolicy/log_ratio/std", "heldout/pass@4"} <= keys
    assert len(keys) > 40
    assert report.METRICS_FILE == METRICS_FILE
    assert report.load_log_history(tmp_path) == events  # `gspo-trl report` reads metrics.jsonl first


LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["v_proj", "q_proj"]}


@pytest.mark.parametrize(
    ("lora", "expected"),
    [
        (None, "  model    tiny, full fine-tuning"),
        (LORA, "  model    tiny, LoRA rank 4 (alpha 8) on q_proj, v_proj"),
    ],
)
def test_banner_names_the_model_as_a_model_and_says_lora(tmp_path: Path, lora, expected) -> None:
    """The first lines said `training runs/demo/warm-start` (read as an output path) and never
    said LoRA: a LoRA run looked like full fine-tuning."""
    overrides = {"output_dir": str(tmp_path), "data.num_rows": 64, "data.eval_size": 8}
    if lora is not None:
        overrides["model.lora"] = lora
    trainer = build_trainer(load_recipe(TINY_RECIPE, overrides))
    (console,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, ConsoleCallback)]
    lines = console.header.splitlines()
    assert lines[:2] == ["gspo-trl: training", expected], console.header
    assert f"output {tmp_path}" in console.header


@pytest.mark.parametrize(
    ("lora", "expected"),
    [
        ({"r": 16, "lora_alpha": 32, "target_modules": "all-linear"}, "rank 16 (alpha 32) on all-linear"),
        ({"r": 8, "lora_alpha": 16}, "rank 8 (alpha 16) on peft defaults"),
    ],
)
def test_model_line_says_the_lora_rank_and_targets(lora, expected) -> None:
    from peft import LoraConfig

    assert model_line("m", LoraConfig(**lora)) == f"m, LoRA {expected}"


def test_report_falls_back_to_trainer_state_without_metrics_file(tmp_path: Path) -> None:
    history = [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.7}]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    assert report.load_log_history(tmp_path) == history
    (tmp_path / METRICS_FILE).write_text(json.dumps({"step": 3, "reward": 0.9}) + "\n")
    assert report.load_log_history(tmp_path) == [{"step": 3, "reward": 0.9}]


def test_an_earlier_logging_config_cannot_silence_the_clip_alarm() -> None:
    """dictConfig disables existing loggers by default; a library may raise a level: the alarm
    still reaches the console."""
    alarm_logger = logging.getLogger("gspo_trl.training.probes.diagnostics")
    was = alarm_logger.disabled, alarm_logger.level
    alarm_logger.disabled, _ = True, alarm_logger.setLevel(logging.ERROR)
    try:
        printed: list[str] = []
        console = ConsoleCallback(
            "banner",
            printer=lambda text, flush: printed.append(text),
            probes=line_probes(),
            alarm_loggers=CLIP,
        )
        args = TrainingArguments(output_dir="unused", report_to="none")
        state, control = TrainerState(max_steps=4), TrainerControl()
        console.on_train_begin(args, state, control)
        alarm = ClipAlarm(DiagnosticsConfig(warn_after_steps=1))
        alarm.update({"clip/pos_adv": 0.9, "clip/region": 0.8}, 3e-4, 4e-4)
        console.close()
        assert any(line.startswith("! GSPO: off-policy minibatches clipped") for line in printed), printed
    finally:
        alarm_logger.disabled = was[0]
        alarm_logger.setLevel(was[1])


def test_a_console_whose_run_raised_does_not_take_the_next_runs_alarms() -> None:
    """transformers calls on_train_end only when training succeeds: a run that raised left its
    console's filter on the alarm loggers, first in line, and the next run's alarms went there."""
    args = TrainingArguments(output_dir="unused", report_to="none")
    state, control = TrainerState(max_steps=4), TrainerControl()
    crashed: list[str] = []
    ConsoleCallback(
        "old", printer=lambda text, flush: crashed.append(text), probes=line_probes(), alarm_loggers=CLIP
    ).on_train_begin(args, state, control)
    printed: list[str] = []
    console = ConsoleCallback(
        "new", printer=lambda text, flush: printed.append(text), probes=line_probes(), alarm_loggers=CLIP
    )
    console.on_train_begin(args, state, control)
    ClipAlarm(DiagnosticsConfig(warn_after_steps=1)).update(
        {"clip/pos_adv": 0.9, "clip/region": 0.8}, 3e-4, 4e-4
    )
    console.close()
    assert crashed == ["old"]
    assert any(line.startswith("! GSPO: off-policy minibatches clipped") for line in printed), printed


@pytest.mark.usefixtures("single_torch_thread")
def test_training_that_raises_lets_go_of_the_alarm_loggers(tmp_path: Path) -> None:
    """GSPOTrainer.train closes the console on the way out of an exception."""
    from transformers import TrainerCallback

    from gspo_trl.training.probes.console import install_console
    from tests._gspo_helpers import make_trainer, tiny_model_dir

    class Boom(TrainerCallback):
        def on_step_end(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("boom")

    trainer = make_trainer(tiny_model_dir(tmp_path / "tiny"), tmp_path / "out", max_steps=2)
    install_console(trainer, "tiny", ["length"])
    trainer.add_callback(Boom())
    with pytest.raises(RuntimeError, match="boom"):
        trainer.train()
    left = {name: logging.getLogger(name).filters for name in trainer.probes.alarm_loggers()}
    assert all(not filters for filters in left.values()), left
