"""Each reward is visible on the step line, and one that scores every completion alike is an alarm.

Two built-in rewards once sat at 0.0 for a whole run unnoticed: the step line showed only the
weighted total. The real run below trains the tiny recipe with a second reward that can never
act (`soft_overlong` with its 4096-token limit against 8-token completions: always 0.0).
"""

from __future__ import annotations

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from gspo_trl.config.recipe import load_recipe
from gspo_trl.training.build import train_recipe
from gspo_trl.training.reporting.console_lines import ConsoleCallback, step_line
from gspo_trl.training.reporting.reward_watch import CONSTANT_REWARD_ROLLOUTS, reward_means_part
from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)
from tests._paths import ROOT
from tests.training.reporting._line_probes import line_probes


def _rollout(math_std: float, math_mean: float = 0.5) -> dict:
    return {
        "loss": 0.0,
        "reward": 0.5,
        "reward_std": 0.2,
        "rewards/math/mean": math_mean,
        "rewards/math/std": math_std,
        "rewards/format/mean": 0.0,
        "rewards/format/std": 0.0,
    }


@pytest.mark.parametrize(
    ("logs", "expected"),
    [
        ({"rewards/math/mean": 0.5, "rewards/math/std": 0.1}, None),  # one reward: the total says it
        ({"rewards/math/mean": 0.5, "rewards/format/mean": 0.0}, "[math 0.50 format 0.00]"),
        ({"rewards/a/b/mean": 1.0, "rewards/c/mean": 0.25}, "[a/b 1.00 c 0.25]"),
        ({"reward": 1.0}, None),
    ],
)
def test_reward_means_part(logs, expected) -> None:
    assert reward_means_part(logs) == expected


def test_step_line_shows_each_reward_and_carries_it_between_rollouts() -> None:
    line = step_line(_rollout(0.1), 4, 8, 1.0, probes=line_probes())
    assert "reward 0.500 ±0.20 [math 0.50 format 0.00] |" in line, line
    printed: list[str] = []
    console = ConsoleCallback(
        "banner", printer=lambda text, flush: printed.append(text), probes=line_probes()
    )
    _drive(console, [_rollout(0.1), {"loss": 0.0}])
    assert "[math 0.50 format 0.00] (rollout of step 1)" in printed[-1], printed


def _drive(console: ConsoleCallback, events: list[dict]) -> None:
    args = TrainingArguments(output_dir="unused", report_to="none")
    state, control = TrainerState(max_steps=len(events)), TrainerControl()
    console.on_train_begin(args, state, control)
    for step, logs in enumerate(events, start=1):
        console.on_step_begin(args, state, control)
        state.global_step = step
        console.on_log(args, state, control, logs=logs)
    console.close()


@pytest.mark.parametrize(
    ("events", "alarmed"),
    [
        ([_rollout(0.1)] * CONSTANT_REWARD_ROLLOUTS, ["format"]),
        ([_rollout(0.0)] * (CONSTANT_REWARD_ROLLOUTS + 2), ["math", "format"]),  # once each
        ([_rollout(0.1)] * (CONSTANT_REWARD_ROLLOUTS - 1), []),
        ([_rollout(0.1), {"loss": 0.0}, _rollout(0.1), {"loss": 0.0}, _rollout(0.1)], ["format"]),
        ([{**_rollout(0.1), "rewards/format/std": 0.3}] * 5, []),
    ],
)
def test_a_reward_constant_over_several_rollouts_is_an_alarm(events, alarmed) -> None:
    printed: list[str] = []
    console = ConsoleCallback(
        "banner", printer=lambda text, flush: printed.append(text), probes=line_probes()
    )
    _drive(console, events)
    assert [alarm.split("'")[1] for alarm in console.alarms] == alarmed
    assert sum(line.startswith("! reward ") for line in printed) == len(alarmed)


@pytest.mark.slow
def test_a_run_with_a_reward_that_never_acts_says_so(tmp_path, capsys) -> None:
    import yaml

    recipe = yaml.safe_load((ROOT / "recipes" / "tiny" / "reversal.yaml").read_text())
    recipe["rewards"] = [*recipe["rewards"], "soft_overlong"]
    recipe.pop("heldout")
    path = tmp_path / "two_rewards.yaml"
    path.write_text(yaml.safe_dump(recipe))
    fast = {"max_steps": 6, "per_device_train_batch_size": 8, "num_generations": 4, "logging_steps": 1}
    fast.update(
        {"max_completion_length": 8, "data.num_rows": 64, "data.eval_size": 8, "steps_per_generation": 2}
    )
    fast["output_dir"] = str(tmp_path / "run")
    train_recipe(load_recipe(path, fast))
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert "soft_overlong 0.00]" in steps[0] and "[digit_reversal_reward " in steps[0], steps[0]
    assert "! reward 'soft_overlong' scored every completion 0 for 3 rollout batches" in out, out
