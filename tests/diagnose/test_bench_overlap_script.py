"""scripts/bench_overlap.py: its arguments (a run too short to hold a warm-up batch and a timed
one is refused in one line; --quick is one seed), and its summary lines' format. The experiment
itself (a vLLM-CPU server and trainer runs, minutes) is the script's, not CI's."""

from __future__ import annotations

import pytest

from tests._scripts import load_script

bench = load_script("bench_overlap")


def test_quick_is_one_seed_and_few_steps():
    args = bench.parse_args(["--quick", "--seeds", "3", "4", "5"])
    assert args.seeds == [3] and args.steps == 6


@pytest.mark.parametrize("argv", [["--steps", "2"], ["--steps", "7"], ["--prompts", "0"]])
def test_a_run_without_a_timed_rollout_batch_is_refused(argv, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert "must" in capsys.readouterr().err


def test_the_reward_has_something_to_learn():
    assert bench.length_reward(["", "x" * 60, "x" * 500]) == [0.0, 0.5, 1.0]
