"""Held-out evaluation: rows split across ranks, batches bounded by tokens, sampling settings.

The distributed check launches tests/_heldout_dist_run.py (a real GSPOTrainer and
HeldoutCallback on the tiny model) with 2 gloo processes and with 1, and asks that each rank
graded a disjoint share of the rows, the shares cover every row, and the gathered score is
the 1-process score.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gspo_trl.eval.generation import sampling_kwargs, token_bounded_batches
from gspo_trl.training.heldout.generation import shard_rows
from gspo_trl.training.heldout.scoring import mean_grade
from tests._gspo_helpers import tiny_model_dir
from tests._paths import ROOT

SCRIPT = ROOT / "tests" / "_heldout_dist_run.py"
ACCELERATE = [
    sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
    "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
]  # fmt: skip


@pytest.mark.parametrize(
    ("lengths", "new_tokens", "budget", "max_rows", "expected"),
    [
        ([10] * 8, 90, 400, 64, [range(0, 4), range(4, 8)]),  # 4 rows x 100 tokens = budget
        ([10] * 8, 90, 10_000, 3, [range(0, 3), range(3, 6), range(6, 8)]),  # row cap
        ([10, 10, 300, 10], 90, 400, 64, [range(0, 2), range(2, 3), range(3, 4)]),  # long prompt alone
        ([1000], 90, 400, 64, [range(0, 1)]),  # over budget alone: still generated
        ([], 90, 400, 64, []),
        # 4B at 8k new tokens: 64 rows would be ~79 GB of KV cache; the default budget takes 7.
        ([500] * 64, 8192, 65536, 64, [range(i, min(i + 7, 64)) for i in range(0, 64, 7)]),
    ],
)
def test_batches_hold_at_most_the_token_budget(lengths, new_tokens, budget, max_rows, expected) -> None:
    batches = token_bounded_batches(lengths, new_tokens, budget, max_rows)
    assert batches == expected
    assert [i for batch in batches for i in batch] == list(range(len(lengths)))


@pytest.mark.parametrize(("rows", "shards"), [(11, 2), (10, 2), (3, 4), (0, 2), (256, 8), (5, 1)])
def test_shards_are_disjoint_and_cover_every_row(rows: int, shards: int) -> None:
    parts = [shard_rows(rows, shards, index) for index in range(shards)]
    assert sorted(i for part in parts for i in part) == list(range(rows))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize(
    ("temperature", "expected"),
    [
        (0.0, {"do_sample": False}),
        (0.7, {"do_sample": True, "temperature": 0.7, "top_p": 0.95, "top_k": 20}),
    ],
)
def test_sampling_follows_the_recipe_top_p_and_top_k(temperature: float, expected: dict) -> None:
    assert sampling_kwargs(temperature, top_p=0.95, top_k=20) == expected


@pytest.mark.parametrize(
    ("grades", "score", "judged"),
    [
        ([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], 0.5, 1.0),  # pass@1 = mean over all samples
        ([[1.0, None], [float("nan"), 0.0]], 0.5, 0.5),
        ([[None]], float("nan"), 0.0),
    ],
)
def test_score_is_the_mean_over_judged_samples(grades, score, judged) -> None:
    result = mean_grade(grades)
    assert result["judged"] == judged
    assert result["score"] == pytest.approx(score, nan_ok=True)


def _launch(command: list[str]) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        ["timeout", "-k", "10", "240", *command], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_two_ranks_split_the_rows_and_log_the_one_rank_score(tmp_path: Path) -> None:
    model = tiny_model_dir(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    _launch([sys.executable, str(SCRIPT), str(one), str(model)])
    _launch([*ACCELERATE, str(SCRIPT), str(two), str(model)])
    single = json.loads((one / "rank0.json").read_text())
    ranks = [json.loads((two / f"rank{i}.json").read_text()) for i in range(2)]
    assert single["world"] == 1 and [r["world"] for r in ranks] == [2, 2]
    assert all(single["seen"].count(p) == 3 for p in single["seen"])  # 1 greedy + 2 sampled each
    shares = [set(r["seen"]) for r in ranks]
    assert not shares[0] & shares[1], "both ranks generated the same rows"
    assert sorted(ranks[0]["seen"] + ranks[1]["seen"]) == sorted(single["seen"])
    for rank in ranks:
        assert rank["logs"] == ranks[0]["logs"]  # every rank holds the gathered result
        assert rank["logs"]["heldout/score"] == pytest.approx(single["logs"]["heldout/score"], abs=1e-6)
        assert rank["logs"]["heldout/judged"] == single["logs"]["heldout/judged"] == 1.0
        assert 0 <= rank["logs"]["heldout/pass@1"] <= rank["logs"]["heldout/pass@2"] <= 1
