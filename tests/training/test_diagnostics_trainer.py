"""GSPOTrainer diagnostics in real training runs of the tiny model on CPU."""

from __future__ import annotations

import pytest
from transformers import TrainerCallback

from gspo_trl.config.sections import DiagnosticsConfig
from gspo_trl.training.reporting.console_lines import ConsoleCallback
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401

pytestmark = pytest.mark.slow

STAT_SUFFIXES = [
    *(f"log_ratio/{k}" for k in ("mean", "std", "p5", "p50", "p95", "min", "max")),
    *(f"clip/{k}" for k in ("low", "high", "region")),
    "outside/low",
    "outside/high",
    "entropy",
    "responses",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("diag"))


@pytest.fixture(scope="module")
def gspo_run(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("gspo-run")
    trainer = make_trainer(
        model_dir,
        out,
        max_steps=8,
        learning_rate=1e-2,
        epsilon=3e-3,
        epsilon_high=4e-3,
        trainer_kwargs={"diagnostics": DiagnosticsConfig(length_buckets=(8,))},
    )
    recorder = LogRecorder()
    trainer.add_callback(recorder)
    trainer.train()
    history = History(entry for entry in trainer.state.log_history if "loss" in entry)
    history.callback_logs = recorder.logs
    return history


class History(list):
    """The run's training log entries, plus what a logging callback received."""

    callback_logs: list[dict]


class LogRecorder(TrainerCallback):
    """Receives logs exactly as report_to integrations (trackio, wandb, tensorboard) do: on_log."""

    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def test_metrics_reach_logging_callbacks(gspo_run):
    seen = [log for log in gspo_run.callback_logs if "loss" in log]
    assert len(seen) == 8
    for log, entry in zip(seen, gspo_run, strict=True):
        gspo = {k: v for k, v in entry.items() if k.startswith("gspo/")}
        assert gspo and {k: log[k] for k in gspo} == gspo


def test_every_step_logs_its_minibatch(gspo_run):
    assert [e["step"] for e in gspo_run] == list(range(1, 9))
    for entry in gspo_run:
        mb = (entry["step"] - 1) % 4 + 1  # steps_per_generation = 4, one update per step
        keys = {k for k in entry if k.startswith("gspo/mb")}
        assert {f"gspo/mb{mb}/{s}" for s in STAT_SUFFIXES} <= keys, entry["step"]
        assert all(k.startswith(f"gspo/mb{mb}/") for k in keys)
        assert entry[f"gspo/mb{mb}/responses"] == 8
        assert ("gspo/offpolicy/clip/region" in entry) == (mb > 1)
        buckets = {k.rsplit("/", 1)[1] for k in keys if "/clip/len_" in k}
        assert buckets and buckets <= {"len_0-8", "len_8-inf"}


def test_on_policy_minibatch_has_unit_ratio_and_off_policy_drifts(gspo_run):
    for entry in gspo_run:
        mb = (entry["step"] - 1) % 4 + 1
        spread = entry[f"gspo/mb{mb}/log_ratio/max"] - entry[f"gspo/mb{mb}/log_ratio/min"]
        if mb == 1:
            assert abs(entry["gspo/mb1/log_ratio/max"]) < 1e-5 and entry["gspo/mb1/clip/region"] == 0
        else:
            assert spread > 1e-3


def test_stats_agree_with_trls_own_metrics(gspo_run):
    """TRL logs per-sequence clip ratios and token entropy for the same minibatch."""
    for entry in gspo_run:
        mb = (entry["step"] - 1) % 4 + 1
        assert entry[f"gspo/mb{mb}/clip/region"] == pytest.approx(entry["clip_ratio/region_mean"], abs=1e-6)
        assert entry[f"gspo/mb{mb}/clip/low"] == pytest.approx(entry["clip_ratio/low_mean"], abs=1e-6)
        assert entry[f"gspo/mb{mb}/entropy"] == pytest.approx(entry["entropy"], rel=1e-5)
        if mb == 1:
            assert entry["gspo/zero_variance_groups"] == pytest.approx(entry["frac_reward_zero_std"])
    assert any(e["clip_ratio/region_mean"] > 0 for e in gspo_run)


def test_everything_clipped_warning_fires_once_with_numbers(model_dir, tmp_path):
    trainer = make_trainer(
        model_dir,
        tmp_path,
        max_steps=6,
        learning_rate=1e-2,
        epsilon=1e-7,
        epsilon_high=1e-7,
        trainer_kwargs={"diagnostics": DiagnosticsConfig(warn_clip_fraction=0.25, warn_after_steps=2)},
    )
    trainer.train()
    # GSPOTrainer prints alarms as the CLI does, as `!` lines of its console (not log records)
    console = next(c for c in trainer.callback_handler.callbacks if isinstance(c, ConsoleCallback))
    warnings = [alarm for alarm in console.alarms if "positive-advantage" in alarm]
    assert len(warnings) == 1, warnings
    assert "eps_high=1e-07" in warnings[0] and "%" in warnings[0]


def test_gspo_token_run_logs_the_same_statistics(model_dir, tmp_path):
    trainer = make_trainer(
        model_dir,
        tmp_path,
        max_steps=4,
        learning_rate=1e-2,
        importance_sampling_level="token",
        trainer_kwargs={"gspo_token": True},
    )
    trainer.train()
    last = [e for e in trainer.state.log_history if "loss" in e][-1]
    assert last["gspo/mb4/responses"] == 8
    assert last["gspo/mb4/log_ratio/std"] > 0
