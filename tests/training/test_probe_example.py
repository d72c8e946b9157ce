"""The probe example of docs/probes.md (a per-step response-length histogram), run as written in
real GSPOTrainer steps on the tiny model: the page's code block is the code under test."""

from __future__ import annotations

import re
import types

import pytest

from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401
from tests._paths import ROOT

PAGE = ROOT / "docs" / "probes.md"
MAX_LINES = 60
ROLLOUT = 8 * 4
"""Responses per rollout batch: per_device_train_batch_size 8 x steps_per_generation 4."""


def example_source() -> str:
    match = re.search(r"<!-- example: length_histogram -->\n```python\n(.*?)```", PAGE.read_text(), re.S)
    assert match, "docs/probes.md lost its example block"
    return match.group(1)


def example_module() -> types.ModuleType:
    module = types.ModuleType("length_histogram_example")
    exec(compile(example_source(), str(PAGE), "exec"), module.__dict__)
    return module


def test_the_example_is_under_sixty_lines():
    assert len(example_source().splitlines()) < MAX_LINES


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    probe = example_module().LengthHistogramProbe(edges=(4, 8, 12))
    trainer = make_trainer(tiny_model_dir(root), root / "out", max_steps=8, probes=[probe])
    trainer.train()
    return trainer, [e for e in trainer.state.log_history if "loss" in e and "train_runtime" not in e]


def test_the_histogram_is_logged_at_each_rollout_and_covers_its_responses(run):
    trainer, logged = run
    keys = ["response_length/0-4", "response_length/4-8", "response_length/8-12", "response_length/12-inf"]
    with_rollout = [e for e in logged if "reward" in e]  # TRL logs the reward once per rollout batch
    assert [e["step"] for e in with_rollout] == [1, 5]
    for entry in logged:
        if entry in with_rollout:
            shares = [entry[k] for k in keys]
            assert sum(shares) == pytest.approx(1.0)
            assert all(abs(s * ROLLOUT - round(s * ROLLOUT)) < 1e-6 for s in shares)  # whole responses
            # TRL's own length statistics of the same rollout: its shortest and longest responses
            # fall in buckets the histogram fills, and no bucket beyond them is filled
            low, high = entry["completions/min_length"], entry["completions/max_length"]
            edges = [0, 4, 8, 12, float("inf")]
            filled = [i for i, s in enumerate(shares) if s > 0]
            assert filled[0] == next(i for i in range(4) if edges[i] <= low < edges[i + 1])
            assert filled[-1] == next(i for i in range(4) if edges[i] <= high < edges[i + 1])
        else:
            assert not any(k in entry for k in keys), entry  # updates reusing the rollout: nothing new
    assert trainer.probes[-1].counts.sum() == 0  # emptied at each log


def test_a_recipe_names_the_example_probe_as_the_page_shows(tmp_path, capsys):
    """`probes: [my_probes.py:LengthHistogramProbe]`: validate accepts it, the trainer gets it;
    a name that is not a Probe is refused in one line (issue 44 item 6: probes were Python-only)."""
    from gspo_trl.cli.main import main as gspo_trl_main
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer
    from tests.cli.test_bad_input import _recipe

    (tmp_path / "my_probes.py").write_text(example_source())
    page = PAGE.read_text()
    assert "probes: [my_probes.py:LengthHistogramProbe]" in page
    spec = str(tmp_path / "my_probes.py") + ":LengthHistogramProbe"
    recipe = _recipe(tmp_path, extra=f"probes: [{spec}]\n")
    assert gspo_trl_main(["validate", str(recipe)]) == 0, capsys.readouterr().err
    trainer = build_trainer(load_recipe(recipe))
    assert [type(p).__name__ for p in trainer.probes.probes][-1] == "LengthHistogramProbe"
    not_a_probe = "gspo_trl.data.synthetic:digit_reversal_reward"
    assert gspo_trl_main(["validate", str(recipe), "--probes", f"[{not_a_probe}]"]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert f"probes[0] ('{not_a_probe}') is <function digit_reversal_reward" in line, line
    assert "not a Probe subclass" in line
