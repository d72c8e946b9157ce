"""Progress of the long commands: a bar on a terminal, a plain line every tenth in a pipe.

A "terminal" here is pytest's captured stderr with `isatty()` answering True: tqdm decides by
exactly that call, so the bars under test are the real ones, written where users see them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from gspo_trl.core.progress import progress_bar, vllm_progress
from gspo_trl.training.reporting.console_lines import ConsoleCallback
from gspo_trl.training.reporting.metrics_file import MetricsFileCallback
from gspo_trl.training.reporting.step_progress import StepProgressBar, show_steps_as_bar
from tests._gspo_helpers import single_torch_thread, tiny_model_dir  # noqa: F401 (fixture)
from tests._paths import ROOT

os.environ["HF_HUB_OFFLINE"] = "1"
REPO = ROOT
ETA = re.compile(r"<\d\d:\d\d")
"""tqdm's time-left field, e.g. `[00:01<00:03, 2.5it/s]`."""


def _drive(bar, updates: int) -> None:
    for _ in range(updates):
        bar.update(1)
    bar.close()


@pytest.mark.parametrize(
    ("total", "updates", "lines", "last"),
    [(1000, 1000, 10, "1000/1000"), (1000, 250, 3, "250/1000"), (4, 4, 4, "4/4"), (0, 3, 0, None)],
)
def test_off_a_terminal_a_plain_line_every_tenth(
    capsys: pytest.CaptureFixture[str], total, updates, lines, last
) -> None:
    """A log file gets one line per tenth of the way (no carriage returns), and one where it
    stopped short; a long stage is never silent in `make demo > demo.log`."""
    bar = progress_bar(total, "warm-start SFT", unit="step")
    bar.set_postfix({"loss": "0.412"}, refresh=False)
    _drive(bar, updates)
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) == lines and "\r" not in "".join(printed), printed
    if last:
        assert printed[-1].startswith(f"warm-start SFT: {last} step (") and printed[-1].endswith("loss 0.412")
        assert (
            ("ETA" in printed[-1]) == (updates < total) and "s/step" in printed[0]
        ) or "step/s" in printed[0]


def test_a_bar_shows_counts_and_time_left_on_a_terminal(terminal, capsys: pytest.CaptureFixture[str]) -> None:
    _drive(progress_bar(5, "filter", unit="prompt"), 5)
    err = capsys.readouterr().err
    assert "filter" in err and "5/5" in err and ETA.search(err) and "prompt/s" in err


def test_vllm_bar_keeps_its_counts_under_our_name(terminal, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM calls `use_tqdm(total=..., desc="Processed prompts", dynamic_ncols=True, postfix=...)`."""
    bar = vllm_progress("eval (greedy)")(total=3, desc="Processed prompts", dynamic_ncols=True, postfix="x")
    for _ in range(3):
        bar.update(1)
    bar.close()
    err = capsys.readouterr().err
    assert "eval (greedy)" in err and "3/3" in err and "Processed prompts" not in err
    queued = list(vllm_progress("eval (greedy)")(["a", "b"], desc="Adding requests"))
    assert queued == ["a", "b"] and "Adding requests" not in capsys.readouterr().err


def test_vllm_gets_no_bar_off_a_terminal() -> None:
    """A disabled bar is not enough: vLLM divides by its elapsed time, which stays 0."""
    assert vllm_progress("eval (greedy)") is False


@pytest.mark.parametrize("on_terminal", [False, True])
def test_step_bar_counts_steps_and_shows_the_loss(
    on_terminal: bool, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    if on_terminal:
        request.getfixturevalue("terminal")
    bar = StepProgressBar("warm-start SFT")
    bar.on_train_begin(None, SimpleNamespace(max_steps=50, global_step=0), None)
    for step in range(50):
        bar.on_step_end(None, None, None)
        if step % 10 == 9:
            bar.on_log(None, None, None, logs={"loss": 1.0 / (step + 1)})
    bar.on_train_end(None, None, None)
    err = capsys.readouterr().err
    if on_terminal:
        assert "warm-start SFT" in err and "50/50" in err and "loss=0.020" in err
    else:
        assert len(err.splitlines()) == 10 and err.splitlines()[-1].startswith("warm-start SFT: 50/50 step")
        assert (
            "loss 0.025" in err.splitlines()[-1]
        )  # the line precedes its step's log (transformers: on_step_end, then on_log)


def test_a_resumed_run_starts_its_bar_at_the_resumed_step(
    terminal, capsys: pytest.CaptureFixture[str]
) -> None:
    bar = StepProgressBar("calibrate")
    bar.on_train_begin(None, SimpleNamespace(max_steps=8, global_step=6), None)
    bar.on_step_end(None, None, None)
    bar.on_train_end(None, None, None)
    assert "7/8" in capsys.readouterr().err


@pytest.mark.slow
def test_tools_trade_the_console_for_a_bar(
    tmp_path: Path, terminal, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trainer built from a recipe prints console lines; after show_steps_as_bar only the bar
    shows (on stderr), and metrics.jsonl is still written with every key."""
    import json

    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer

    overrides = {
        "model.name_or_path": str(tiny_model_dir(tmp_path)),
        "data.num_rows": 32,
        "data.eval_size": 4,
        "heldout.every_steps": 0,
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "steps_per_generation": 2,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "output_dir": str(tmp_path / "run"),
    }
    trainer = build_trainer(load_recipe(REPO / "recipes/tiny/reversal.yaml", overrides))
    kinds = {type(c) for c in trainer.callback_handler.callbacks}
    assert ConsoleCallback in kinds and MetricsFileCallback in kinds
    show_steps_as_bar(trainer, "calibrate")
    kinds = {type(c) for c in trainer.callback_handler.callbacks}
    assert kinds.isdisjoint({ConsoleCallback, PrinterCallback, ProgressCallback})
    assert StepProgressBar in kinds and MetricsFileCallback in kinds
    trainer.train()
    captured = capsys.readouterr()
    assert "step 1/2" not in captured.out and "{'loss'" not in captured.out
    assert "calibrate" in captured.err and "2/2" in captured.err
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert any("gspo/offpolicy/clip/region" in json.loads(line) for line in lines)


def test_check_logprobs_rescoring_shows_a_bar(
    tmp_path: Path, terminal, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trainer-side rescoring of `check-logprobs` (no vLLM needed for this part)."""
    from gspo_trl.diagnose.check_logprobs import trainer_logprobs
    from tests._gspo_helpers import make_trainer

    trainer = make_trainer(tiny_model_dir(tmp_path), tmp_path / "run")
    logps = trainer_logprobs(trainer, [[1, 2, 3]] * 6, [[4, 5]] * 6, batch_size=4)
    assert len(logps) == 6 and all(x.numel() == 2 for x in logps)
    err = capsys.readouterr().err
    assert "trainer log-probs" in err and "6/6" in err
