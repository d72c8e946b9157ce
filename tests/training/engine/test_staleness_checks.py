"""`engine.max_staleness`: off by default, each refusal one line naming the keys, through the CLI's
`gspo-trl validate` and through GSPOConfig alike (gspo_trl.config.sections.engine_staleness); and
the schedule's arithmetic (gspo_trl.training.probes.staleness), fresh and resumed."""

from __future__ import annotations

import pytest

from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.probes.staleness import StalenessSchedule
from gspo_trl.training.trainer import builtin_probes
from tests._cli_helpers import gspo_trl_main, refused_by_all_three

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
        "engine.max_staleness must be a whole number of rollout batches from 0",
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
    line, message = refused_by_all_three(argv(overrides), fields, capsys, str(tmp_path))
    assert phrase in line
    assert phrase in message or name == "not a number"


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


def test_rounds_of_one_rollout_batch_are_one_rollout():
    """Dynamic sampling's generation rounds (and a second rollout batch inside one optimizer
    step) begin at the same step: one r, one history entry."""
    schedule = StalenessSchedule(1, 2, 1)
    for step in (0, 0, 0, 2, 2, 4):
        schedule.begin_rollout(step, True)
        if schedule.sync_due():
            schedule.synced(step)
        schedule.current()
    assert [(v.rollout, v.staleness) for v in schedule.history] == [(0, 0), (1, 1), (2, 0)]


@pytest.mark.parametrize(
    ("micro", "accumulation", "step", "rollout"),
    [(2, 1, 6, 3), (4, 2, 6, 3), (2, 4, 3, 3), (3, 2, 1, 1), (3, 2, 3, 2), (3, 2, 4, 3)],
)
def test_the_first_rollout_index_after_a_resume(micro, accumulation, step, rollout):
    """Rollout k begins at micro-step k x micro, step floor(k x micro / accumulation); a step
    spanning several rollout batches counts once."""
    schedule = StalenessSchedule(1, micro, accumulation)
    schedule.begin_rollout(step, True)
    assert schedule.rollout == rollout


@pytest.mark.parametrize(("d", "micro", "accumulation", "first_step", "rollouts", "expected"), SCHEDULES)
def test_the_schedule(d, micro, accumulation, first_step, rollouts, expected):
    schedule = StalenessSchedule(d, micro, accumulation)
    steps_per_rollout = micro // accumulation
    for r in range(rollouts):
        schedule.begin_rollout(first_step + r * steps_per_rollout, True)
        if schedule.sync_due():
            schedule.synced(first_step + r * steps_per_rollout)
        schedule.current()
    assert [v.staleness for v in schedule.history] == expected
    assert all(v.updates == v.staleness * steps_per_rollout for v in schedule.history)


def test_a_sync_outside_a_rollout_always_runs_and_tags_truthfully():
    """Held-out scoring syncs outside any rollout and must score the current policy: that sync is
    never skipped, and the rows sampled after it carry the version it pushed. Before the first
    rollout (the run's step-0 held-out score) the first batch is fresh, not one batch stale; in the
    middle of a cycle the next batch counts from the batch whose span held that step."""
    schedule = StalenessSchedule(2, 2, 1)
    assert schedule.sync_due(in_rollout=False)
    schedule.synced(0, in_rollout=False)  # held-out before step 1: TRL then skips its own sync
    schedule.begin_rollout(0, True)
    schedule.current()
    schedule.begin_rollout(2, True)
    assert not schedule.sync_due() and schedule.sync_due(in_rollout=False)
    schedule.current()
    schedule.synced(3, in_rollout=False)  # held-out after step 3, inside rollout batch 1's span
    schedule.begin_rollout(4, True)
    assert not schedule.sync_due()
    schedule.current()
    assert [(v.staleness, v.updates) for v in schedule.history] == [(0, 0), (1, 2), (1, 1)]


def test_an_eval_rollout_syncs_and_the_next_batch_is_tagged_truthfully():
    """TRL evaluation x staleness: `eval_strategy` scored an engine up to d rollout batches stale
    (only held-out scoring forced a sync). An eval rollout now syncs, and the training batch after
    it counts its staleness from the weights the eval pushed (1, not 2)."""
    schedule = StalenessSchedule(2, 2, 1)
    schedule.begin_rollout(0, True)
    assert schedule.sync_due()
    schedule.synced(0)
    schedule.current()
    schedule.begin_rollout(2, True)
    assert not schedule.sync_due()
    schedule.current()
    schedule.begin_rollout(2, False)  # an eval at step 2, its engine one rollout batch stale
    assert schedule.sync_due()
    schedule.synced(2)
    schedule.begin_rollout(4, True)
    assert not schedule.sync_due()
    schedule.current()
    assert [v.staleness for v in schedule.history] == [0, 1, 1]
