"""Issue 35 item 6: a tiny MoE from the CLI, and a console and routing.png that say what the flip
rate means under routing replay.

Under `moe.routing_replay: old` the updates run on pi_old's experts, yet the logged flip rate stays
at 60-80% (it compares the router's own choice with the replayed one), which read as "replay is
broken". The banner now says which meaning applies, the step line marks the rate as router vs
replayed with the share of updates replayed, and routing.png's title says replay was on.
"""

from __future__ import annotations

import json

import pytest

import gspo_trl.core.metric_names as names
from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections.moe import expert_count
from gspo_trl.diagnose.routing_plot import routing_title
from gspo_trl.training.build import train_recipe
from gspo_trl.training.reporting.moe_lines import flips_part
from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)
from tests._paths import ROOT

FLIPS = names.under(names.OFFPOLICY, names.FLIP_RATE)


@pytest.mark.parametrize(
    ("logs", "expected"),
    [
        ({FLIPS: 0.72}, "expert flips 72.0%"),
        ({FLIPS: 0.72, names.ROUTING_REPLAYED: 1.0}, "expert flips 72.0% (router vs replayed, replay 100%)"),
        ({names.ROUTING_REPLAYED: 1.0}, None),
    ],
)
def test_flips_part(logs, expected) -> None:
    assert flips_part(logs) == expected


def test_routing_title_says_replay() -> None:
    assert "replay" not in routing_title([{FLIPS: 0.5, "step": 1}])
    title = routing_title([{FLIPS: 0.5, names.ROUTING_REPLAYED: 1.0, "step": 1}])
    assert "replay ON (100% of updates replayed)" in title and "would choose" in title


def test_tiny_model_moe_builds_a_mixture_of_experts(tmp_path, capsys) -> None:
    out = tmp_path / "moe"
    assert gspo_trl_main(["tiny-model", str(out), "--moe", "--layers", "2", "--hidden-size", "64"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen3_moe" and expert_count(config) == 8
    assert config["num_hidden_layers"] == 2 and config["hidden_size"] == 64
    assert "tiny mixture of experts (8 experts, top-2)" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("replay", ["old", "off"])
def test_the_console_says_what_the_flip_rate_means(tmp_path, capsys, replay) -> None:
    model = tmp_path / "moe"
    assert gspo_trl_main(["tiny-model", str(model), "--moe", "--layers", "2", "--hidden-size", "64"]) == 0
    overrides = {
        "model.name_or_path": str(model),
        "moe.routing_replay": replay,
        "max_steps": 4,
        "logging_steps": 1,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
        "data.num_rows": 64,
        "data.eval_size": 8,
        "learning_rate": 3e-3,  # routing moves within one rollout batch
        "output_dir": str(tmp_path / "run"),
    }
    trainer = train_recipe(load_recipe(ROOT / "recipes" / "tiny" / "reversal.yaml", overrides))
    out = capsys.readouterr().out
    assert f"  MoE      routing replay {replay}:" in out, out
    offpolicy = [line for line in out.splitlines() if line.startswith("step ") and "expert flips" in line]
    assert offpolicy, out
    history = trainer.state.log_history
    if replay == "old":
        assert all("(router vs replayed, replay 100%)" in line for line in offpolicy), offpolicy
        assert {e[names.ROUTING_REPLAYED] for e in history if names.ROUTING_REPLAYED in e} == {1.0}
        assert "replay ON" in routing_title(history)
    else:
        assert not any("replayed" in line for line in offpolicy), offpolicy
        assert not any(names.ROUTING_REPLAYED in e for e in history)
