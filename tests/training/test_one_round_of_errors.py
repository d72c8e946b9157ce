"""Issue 35 item 4: a recipe's mistakes and its data's come in one report, and a reward whose
settings can never act is reported.

On main the data-column error appeared only after the recipe's other mistakes were fixed (the
recipe checks raised before the data was read), and `soft_overlong` with its 4096-token limit
against 16-token completions passed silently and scored 0 for the whole run.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.rewards.shaping import RepetitionPenalty, SoftOverlongPenalty
from tests.training.test_preflight import BASE_RECIPE


def _recipe(tmp_path: Path, *lines: str) -> Path:
    keys = {line.split(":", 1)[0] for line in lines}
    base = [line for line in BASE_RECIPE.splitlines() if line.split(":", 1)[0] not in keys]
    path = tmp_path / "recipe.yaml"
    path.write_text("\n".join([*base, *lines, f"output_dir: {tmp_path / 'out'}"]) + "\n")
    return path


def test_a_missing_column_comes_with_the_recipes_other_mistakes(tmp_path, capsys) -> None:
    rows = tmp_path / "no_solution.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"reverse {n}"}) + "\n" for n in range(64)))
    data = f"data: {{path: {rows}, eval_size: 16}}"
    path = _recipe(tmp_path, data, "learnig_rate: 1.0e-6", "loss_type: dapo")
    for command in ("validate", "train"):
        assert gspo_trl_main([command, str(path)]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(lines) == 3, err
        assert any("learnig_rate" in line for line in lines), err
        assert any("loss_type" in line for line in lines), err
        assert any("solution" in line and "digit_reversal_reward" in line for line in lines), err
        assert f"gspo-trl {command}: 3 problems" in err
    assert not (tmp_path / "out").exists()


def test_a_reward_that_can_never_act_is_reported(tmp_path, capsys, caplog) -> None:
    reward = "  - {name: soft_overlong, max_completion_len: 4096, soft_punish_cache: 512}"
    rewards = "rewards:\n  - gspo_trl.data.synthetic:digit_reversal_reward\n" + reward
    path = _recipe(tmp_path, "max_completion_length: 16")
    path.write_text(
        path.read_text().replace("rewards: [gspo_trl.data.synthetic:digit_reversal_reward]", rewards)
    )
    with caplog.at_level(logging.WARNING, logger="gspo_trl"):
        assert gspo_trl_main(["validate", str(path)]) == 0
    warnings = [r.getMessage() for r in caplog.records if "can never act" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "rewards[1] (soft_overlong)" in warnings[0] and "max_completion_length 16" in warnings[0]
    assert "set max_completion_len: 16" in warnings[0]


@pytest.mark.parametrize(
    ("reward", "cap", "acts"),
    [
        (SoftOverlongPenalty(4096, 512), 16, False),
        (SoftOverlongPenalty(4096, 512), 3584, False),  # the ramp starts after 3584 tokens
        (SoftOverlongPenalty(4096, 512), 3585, True),
        (SoftOverlongPenalty(16, 4), 16, True),
        (SoftOverlongPenalty(16, 0), 16, False),  # hard cut-off at the cap: never beyond it
        (RepetitionPenalty(3), 3, False),  # a repeat of a 3-gram needs 4 tokens
        (RepetitionPenalty(3), 4, True),
        (RepetitionPenalty(3, max_penalty=0.0), 4096, False),
    ],
)
def test_never_acts_table(reward, cap, acts) -> None:
    assert (reward.never_acts(cap) is None) == acts
