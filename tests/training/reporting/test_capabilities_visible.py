"""Issue 44 item 8: the capabilities that ship off are visible while they run. The step line
shows staleness (engine.max_staleness) and w_i (engine.correction) when logged; the banner names
dynamic sampling."""

from __future__ import annotations

from pathlib import Path

import pytest

import gspo_trl.core.metric_names as names
from gspo_trl.training.reporting.console_lines import step_line
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir
from tests.training.reporting._line_probes import line_probes

__all__ = ["single_torch_thread"]


@pytest.mark.parametrize(
    ("logs", "part"),
    [
        ({names.STALENESS_MEAN: 0.5, names.STALENESS_MAX: 1.0}, "stale 0.5 (max 1)"),
        (
            {
                names.CORRECTION_WEIGHT_MEAN: 1.0021,
                names.CORRECTION_WEIGHT_P1: 0.97,
                names.CORRECTION_WEIGHT_P99: 1.05,
            },
            "w_i 1.002 [0.97, 1.05]",
        ),
        ({names.CORRECTION_WEIGHT_MEAN: 0.999}, "w_i 0.999"),
    ],
    ids=["staleness", "w_i with its spread", "w_i alone"],
)
def test_the_step_line_shows_staleness_and_w_i(logs: dict, part: str) -> None:
    line = step_line({"loss": 0.1, "reward": 0.5, **logs}, 10, 20, 1.0, probes=line_probes())
    assert f" | {part} | " in line, line


def test_off_they_are_not_shown() -> None:
    line = step_line({"loss": 0.1, "reward": 0.5}, 10, 20, 1.0, probes=line_probes())
    assert "stale" not in line and "w_i" not in line


def test_the_banner_names_dynamic_sampling(tmp_path: Path) -> None:
    trainer = make_trainer(
        tiny_model_dir(tmp_path), tmp_path / "out", trainer_kwargs={"sampling": {"dynamic": True}}
    )
    console = next(p for p in trainer.probes.probes if type(p).__name__ == "ConsoleProbe")
    header = console.header(trainer)
    assert (
        "  sampling dynamic: groups whose rewards tie are dropped and refilled, up to 3 generation rounds "
        "per rollout batch"
    ) in header, header


@pytest.mark.parametrize("page", ["dynamic-sampling.md", "engine-logprobs.md", "async.md"])
def test_each_capability_page_opens_with_when_to_turn_it_on(page: str) -> None:
    from tests._paths import ROOT

    lines = (ROOT / "docs" / page).read_text(encoding="utf-8").splitlines()
    box = lines[2:5]
    assert all(line.startswith("> - **") for line in box) and lines[5] == "", box
    assert box[0].startswith("> - **Turn it on when**"), box


def test_the_readme_says_staleness_alone_is_not_a_speed_up() -> None:
    from tests._paths import ROOT

    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "`max_staleness` alone is an algorithm study, not a speed-up" in text
