"""Issue 35 item 11: the demo says what its gain is measured against.

'before GSPO' is the SFT warm start alone (plain SFT on the same task), and the demo prints the
command that runs GRPO on the same task (the grpo preset's clip range, read from
gspo_trl.config.defaults) and where the controlled GSPO-vs-GRPO figures live (scripts/bench_toy.py).
On main the demo printed neither.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from gspo_trl.cli.demo import parse_args
from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.config.defaults import ALGORITHMS
from gspo_trl.demo.baselines import baseline_lines, grpo_demo_command
from gspo_trl.demo.pipeline import DEFAULT_RECIPE
from tests._demo_run import DEMO_TIMEOUT_S
from tests._paths import ROOT


def test_the_grpo_command_is_a_valid_grpo_demo(tmp_path, capsys) -> None:
    """The printed command parses as the demo's options, and its recipe overrides validate as GRPO."""
    words = shlex.split(grpo_demo_command())
    assert words[:2] == ["gspo-trl", "demo"]
    args, overrides = parse_args(words[2:])
    assert str(args.output_dir) == "runs/demo-grpo"
    recipe_args = [str(DEFAULT_RECIPE), *overrides, "--output_dir", str(tmp_path / "out")]
    assert gspo_trl_main(["validate", *recipe_args]) == 0, capsys.readouterr().err
    assert "ok (grpo," in capsys.readouterr().out
    grpo = ALGORITHMS["grpo"]
    assert f"--epsilon {grpo['epsilon']:g} --epsilon_high {grpo['epsilon_high']:g}" in grpo_demo_command()


def test_the_pointed_benchmark_exists_and_states_its_figures() -> None:
    text = "\n".join(baseline_lines())
    assert "scripts/bench_toy.py" in text and "plain SFT" in text
    docstring = (ROOT / "scripts" / "bench_toy.py").read_text().split('"""')[1]
    assert "GSPO" in docstring and "GRPO" in docstring and "bench_toy.py" in docstring


@pytest.mark.slow
@pytest.mark.timeout(DEMO_TIMEOUT_S + 300)  # may include the session's one demo run (demo_run fixture)
def test_the_demo_prints_its_baselines(demo_run: Path) -> None:
    log = (demo_run.parent.parent / "demo.log").read_text()
    assert "before GSPO:" in log and "(SFT alone)" in log
    for line in baseline_lines():
        assert line in log, line
