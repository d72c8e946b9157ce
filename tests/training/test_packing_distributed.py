"""`packing: true` on 2 gloo ranks: the same logged metrics and weights as the padded run.

One `accelerate launch` of 2 CPU processes trains tests/_gspo_dist_run.py's float64 GSPO run
(deterministic completions of 2-12 tokens, so every minibatch is padded) twice, padded then
packed (tests/_packing_dist_run.py): each rank packs its own rows and unpacks them to TRL's
(B, C), so the all-reduced gradients, the gathered gspo/* rows and the weights agree to float64
rounding.
"""

from __future__ import annotations

import json
import math

import pytest

from tests._gspo_helpers import tiny_model_dir
from tests._paths import ROOT
from tests.training.test_diagnostics_distributed import ACCELERATE, run
from tests.training.test_packing import compared

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(900)]


def test_two_ranks_train_the_same_packed_and_padded(tmp_path):
    model = tiny_model_dir(tmp_path)
    out = tmp_path / "packing.json"
    run([*ACCELERATE, str(ROOT / "tests" / "_packing_dist_run.py"), str(out), str(model)], ROOT)
    result = json.loads(out.read_text())
    assert result["world"] == 2
    padded, packed = result["logs"]
    assert len(padded) == len(packed) == 8
    checked = 0
    for a, b in zip(padded, packed, strict=True):
        assert 0 < b.pop("perf/packed_fraction") <= 1  # rows of 7-19 tokens, width ~19: few merge
        for key, value in a.items():
            if not compared(key, value):
                continue
            assert math.isclose(value, b[key], rel_tol=1e-5, abs_tol=1e-6), (a["step"], key, value, b[key])
            checked += 1
    assert checked > 100
    assert result["weight_distance"] < 1e-6 * result["largest_weight"]
