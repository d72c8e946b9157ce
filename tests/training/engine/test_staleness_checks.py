"""`engine.max_staleness`: off by default, each refusal one line naming the keys, through the CLI's
`gspo-trl validate` and through GSPOConfig alike (gspo_trl.config.sections.engine_staleness); and
the schedule's arithmetic (gspo_trl.training.engine.staleness), fresh and resumed."""

from __future__ import annotations

import pytest

from gspo_trl.config.sections import EngineConfig
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.engine.staleness import StalenessSchedule
from gspo_trl.training.trainer import builtin_probes
from tests._cli_helpers import gspo_trl_main, refused_alike

RECIPE = "recipes/tiny/reversal.yaml"

REFUSALS = {
    # name: (overrides, GSPOConfig fields, phrase the one-line error must contain)
    "engine log-probs": (
        {"engine.max_staleness": "1", "engine.old_logprobs": "engine", "use_vllm": "true"},
        {"engine": {"max_staleness": 1, "old_logprobs": "engine"}, "use_vllm": True},
        "engine.max_staleness: 1 with engine.old_logprobs: engine",
    ),
    "no vLLM": (
        {"engine.max_staleness": "2"},
        {"engine": {"max_staleness": 2}},
        "engine.max_staleness: 2 delays the vLLM engine's weight syncs; set use_vllm: true",
    ),
    "sleep mode": (
        {"engine.max_staleness": "1", "use_vllm": "true", "vllm_enable_sleep_mode": "true"},
        {"engine": {"max_staleness": 1}, "use_vllm": True, "vllm_enable_sleep_mode": True},
        "engine.max_staleness: 1 with vllm_enable_sleep_mode: true",
    ),
    "auto bounds": (
        {"engine.max_staleness": "1", "engine.correction": "truncate", "use_vllm": "true"},
        {"engine": {"max_staleness": 1, "correction": "truncate"}, "use_vllm": True},
        "engine.max_staleness: 1 with engine.weight_max: auto",
    ),
    "negative": (
        {"engine.max_staleness": "-1"},
        {"engine": {"max_staleness": -1}},
        "engine.max_staleness must be a whole number of rollout batches >= 0",
    ),
    "not a number": (
        {"engine.max_staleness": "two"},
        {"engine": {"max_staleness": "two"}},
        "engine.max_staleness",
    ),
}


def argv(overrides: dict[str, str]) -> list[str]:
    return [RECIPE, *(part for key, value in overrides.items() for part in (f"--{key}", value))]


@pytest.mark.parametrize("name", REFUSALS)
def test_refusals_name_the_keys_in_one_line(name, tmp_path, capsys):
    """`gspo-trl validate` and `gspo-trl train` exit 2 with the same one line; GSPOConfig raises it."""
    overrides, fields, phrase = REFUSALS[name]
    assert phrase in refused_alike(argv(overrides), capsys)
    with pytest.raises(RecipeError) as error:
        GSPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **fields)
    assert "\n" not in str(error.value) and (phrase in str(error.value) or name == "not a number")


def test_off_by_default_and_accepted_with_vllm(tmp_path):
    assert EngineConfig().max_staleness == 0
    assert gspo_trl_main(["validate", *argv({"engine.max_staleness": "2", "use_vllm": "true"})]) == 0
    config = GSPOConfig(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", use_vllm=True, engine={"max_staleness": 2}
    )
    assert config.engine.max_staleness == 2
    names = [type(p).__name__ for p in builtin_probes(config)]
    assert names.index("RoutingProbe") + 1 == names.index("StalenessProbe") < names.index("PerfProbe")
    assert "StalenessProbe" not in [
        type(p).__name__
        for p in builtin_probes(GSPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none"))
    ]


SCHEDULES = [
    # (d, micro-batches per rollout batch, accumulation, first step, rollouts, staleness per rollout)
    (1, 2, 1, 0, 4, [0, 1, 0, 1]),
    (2, 2, 1, 0, 6, [0, 1, 2, 0, 1, 2]),
    (2, 2, 1, 4, 4, [0, 0, 1, 2]),  # resumed at step 4 = rollout batch 2: synced there, then on schedule
    (3, 4, 2, 6, 3, [0, 0, 1]),  # 2 steps per rollout batch, resumed at rollout batch 3
]


@pytest.mark.parametrize(("d", "micro", "accumulation", "first_step", "rollouts", "expected"), SCHEDULES)
def test_the_schedule(d, micro, accumulation, first_step, rollouts, expected):
    schedule = StalenessSchedule(d, micro, accumulation)
    steps_per_rollout = micro // accumulation
    for r in range(rollouts):
        schedule.begin_rollout(first_step + r * steps_per_rollout, True)
        if schedule.sync_due():
            schedule.synced(first_step + r * steps_per_rollout)
        schedule.current()
        schedule.begin_rollout(first_step + r * steps_per_rollout, False)  # an eval keeps the weights
        assert not schedule.sync_due()
    assert [v.staleness for v in schedule.history] == expected
    assert all(v.updates == v.staleness * steps_per_rollout for v in schedule.history)
