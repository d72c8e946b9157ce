"""The weight scan NonFiniteProbe runs after every optimizer step: one bad value anywhere, in any
dtype, stops the run; frozen parameters are not its business."""

from __future__ import annotations

import pytest
import torch

from gspo_trl.training.probes.non_finite import weights_finite


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("value", "finite"), [(0.5, True), (float("nan"), False), (float("inf"), False), (-float("inf"), False)]
)
def test_one_value_decides(dtype, value, finite) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(dtype)
    with torch.no_grad():
        model[1].weight[1, 2] = value
    assert weights_finite(model) is finite


def test_frozen_parameters_are_not_scanned() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
    model[0].weight.requires_grad_(False)
    assert weights_finite(model)
