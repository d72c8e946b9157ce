"""2 gloo processes log the same gspo/* statistics as 1 process over the same global batches.

tests/_gspo_dist_run.py pins generation and minibatch composition so both layouts train on
identical global minibatches (same rows, same order after the gather), in float64 with SGD so
that the two layouts follow the same trajectory (in float32 the near-cancelling policy
gradient differs by ~0.2% between 8-row and 4+4-row all-reduced sums, and the runs drift).
Counts and clip fractions must then match exactly, log s_i statistics to 1e-4 nats (the
largest gap seen over 8 steps is ~1e-5) and entropy to 1e-5 relative. The same launches also
train a tiny Qwen3-MoE with routing replay: its routing flip rates (summed and gathered across
ranks, gspo_trl.training.probes.routing) must match exactly too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe
from tests._gspo_helpers import tiny_model_dir
from tests._paths import ROOT

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = ROOT / "tests" / "_gspo_dist_run.py"
ACCELERATE = [
    sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
    "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
]  # fmt: skip


def run(cmd: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    # `timeout` kills a gloo shutdown that hangs; pytest-timeout is the second line of defence.
    proc = subprocess.run(
        ["timeout", "-k", "10", "400", *cmd], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def two_layouts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    model = tiny_model_dir(tmp)
    moe = ["--moe-model", str(save_tiny_moe(tmp / "moe", TinyMoeSpec(num_hidden_layers=2, hidden_size=64)))]
    run([*ACCELERATE, str(SCRIPT), str(tmp / "w2.json"), str(model), *moe], ROOT)
    run([sys.executable, str(SCRIPT), str(tmp / "w1.json"), str(model), *moe, "--emulate-world", "2"], ROOT)
    return json.loads((tmp / "w1.json").read_text()), json.loads((tmp / "w2.json").read_text())


def test_runs_really_used_one_and_two_processes(two_layouts):
    one, two = two_layouts
    assert (one["world"], two["world"]) == (1, 2)


def test_gathered_rows_are_the_global_batch_in_the_same_order(two_layouts):
    one, two = two_layouts
    assert [mb for mb, _ in one["rows"]] == [mb for mb, _ in two["rows"]] == [1, 2, 3, 4] * 2
    for (_, rows_1), (_, rows_2) in zip(one["rows"], two["rows"], strict=True):
        assert len(rows_1) == len(rows_2) == 8  # the global minibatch, not one rank's 4
        for r1, r2 in zip(rows_1, rows_2, strict=True):
            assert r1[1:3] == pytest.approx(r2[1:3], abs=1e-6)  # advantage and length
            assert r1[0] == pytest.approx(r2[0], abs=1e-4)  # log s_i


def test_logged_statistics_match(two_layouts):
    one, two = two_layouts
    assert len(one["logs"]) == len(two["logs"]) == 8
    checked = 0
    for e1, e2 in zip(one["logs"], two["logs"], strict=True):
        keys = {k for k in e1 if k.startswith("gspo/")}
        assert keys == {k for k in e2 if k.startswith("gspo/")}, e1["step"]
        for key in keys:
            if "/log_ratio/" in key:
                assert e1[key] == pytest.approx(e2[key], abs=1e-4), (e1["step"], key)
            elif key.endswith("/entropy"):
                assert e1[key] == pytest.approx(e2[key], rel=1e-5), (e1["step"], key)
            else:  # counts and clip fractions: exact
                assert e1[key] == pytest.approx(e2[key], abs=1e-6), (e1["step"], key)
            checked += 1
    assert checked > 200
    assert any(e.get("gspo/offpolicy/clip/region", 0) > 0 for e in one["logs"])


def test_moe_routing_flip_rates_match(two_layouts):
    """Exact over the first rollout batch. Later, the layouts' float64 trajectories have drifted
    by ~1e-4 nats (as for the dense model), and a top-k choice is discontinuous: a near-tie may
    fall either way, so a pair or two of the ~250 (response token, layer) pairs may differ."""
    one, two = two_layouts
    assert len(one["moe_logs"]) == len(two["moe_logs"]) == 8
    offpolicy_rates = []
    for e1, e2 in zip(one["moe_logs"], two["moe_logs"], strict=True):
        keys = {k for k in e1 if "/routing/" in k}
        assert keys == {k for k in e2 if "/routing/" in k} and keys, e1["step"]
        for key in keys:
            tolerance = 1e-6 if e1["step"] <= 4 else 0.05  # one pair of a 24-pair response: 0.042
            assert e1[key] == pytest.approx(e2[key], abs=tolerance), (e1["step"], key)
        offpolicy_rates += [e1[k] for k in keys if k == "gspo/offpolicy/routing/flip_rate"]
    assert max(offpolicy_rates) > 0  # routing moved, so the match is not of zeros
