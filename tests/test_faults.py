"""Faults during a run stop it with a message naming the culprit, or are survived.

A user reward that raises, returns the wrong number of scores or strings, or judges nothing
batch after batch stops `gspo-trl train` with exit 2 and one line naming the reward and the
row (the table runs the real wrapper on real reward functions; two cases run a real
training step through the CLI). A disk that fills while a checkpoint is written leaves no
checkpoint that looks complete, and `--resume` after freeing it continues from the last
complete one (a real tmpfs, real runs).
"""

from __future__ import annotations

import asyncio
import re

import pytest
from test_preflight import BASE_RECIPE

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.training.reward_guard import AsyncGuardedReward, RewardFailedError, guard_rewards

COMPLETIONS = ["12", "34", "56", "78"]
PROMPTS = ["reverse 21", "reverse 43", "reverse 65", "reverse 87"]


def raises(completions, **_):
    return {"a": 1}["b"]


def too_few(completions, **_):
    return [1.0] * (len(completions) - 1)


def strings(completions, **_):
    return ["1.0" if c == "56" else 0.0 for c in completions]


def a_string(completions, **_):
    return "1.0"


def infinite(completions, **_):
    return [float("inf")] + [0.0] * (len(completions) - 1)


def never_judges(completions, **_):
    return [None] * len(completions)


async def async_strings(completions, **_):
    return strings(completions)


def fine(completions, **_):
    import numpy as np

    return [1.0, None, np.float32(0.5), True]


FAULTS = [
    # (reward function, words the error must contain)
    (raises, ["'raises'", "KeyError", "test_faults.py:", "reverse 21"]),
    (too_few, ["'too_few'", "3 scores for 4 completions"]),
    (strings, ["'strings'", "'1.0'", "row 2", "'56'"]),
    (a_string, ["'a_string'", "not a list"]),
    (infinite, ["'infinite'", "row 0", "finite"]),
    (async_strings, ["'async_strings'", "row 2"]),
]


def _call(reward, completions=COMPLETIONS):
    result = reward(prompts=PROMPTS, completions=completions, solution=["x"] * len(completions))
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


@pytest.mark.parametrize(("func", "words"), FAULTS, ids=[f[0].__name__ for f in FAULTS])
def test_a_broken_reward_is_named_with_its_row(func, words) -> None:
    (guarded,) = guard_rewards([func])
    assert guarded.__name__ == func.__name__  # TRL's metric key is unchanged
    with pytest.raises(RewardFailedError) as caught:
        _call(guarded)
    for word in words:
        assert word in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_rewards_that_work_pass_through_unchanged() -> None:
    (guarded,) = guard_rewards([fine])
    assert _call(guarded)[:2] == [1.0, None]
    (asynchronous,) = guard_rewards([async_strings])
    assert isinstance(asynchronous, AsyncGuardedReward)


def test_a_reward_that_judges_nothing_stops_after_n_batches() -> None:
    (guarded,) = guard_rewards([never_judges], max_unjudged_batches=3)
    _call(guarded), _call(guarded)
    with pytest.raises(RewardFailedError, match=r"'never_judges' judged no completion .* 3 rollout batches"):
        _call(guarded)
    (mixed,) = guard_rewards([never_judges], max_unjudged_batches=2)
    _call(mixed)
    mixed.func = fine  # one judged batch resets the count
    _call(mixed)
    mixed.func = never_judges
    _call(mixed)


REWARD_MODULE = """
def reward_that_raises(completions, **kwargs):
    raise RuntimeError("my reward is broken")


def reward_of_strings(completions, **kwargs):
    return ["good"] * len(completions)
"""


@pytest.mark.parametrize(
    ("reward", "words"),
    [
        (
            "reward_that_raises",
            ["'reward_that_raises'", "RuntimeError: my reward is broken", "user_rewards.py:3"],
        ),
        ("reward_of_strings", ["'reward_of_strings'", "'good'", "row 0"]),
    ],
)
def test_train_stops_on_a_broken_user_reward_in_one_line(tmp_path, capsys, reward, words) -> None:
    module = tmp_path / "user_rewards.py"
    module.write_text(REWARD_MODULE)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(BASE_RECIPE + f"output_dir: {tmp_path / 'out'}\n")
    assert gspo_trl_main(["train", str(recipe), "--rewards", f"[{module}:{reward}]"]) == 2
    err = capsys.readouterr().err
    lines = re.findall(r"error: .*", err)  # after the progress bar's unterminated line
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
