"""The per-response rows: one named column per entry of RESPONSE_FIELDS, built from a policy pass."""

from __future__ import annotations

import pytest
import torch

from gspo_trl.training.ratio_stats import (
    RESPONSE_FIELDS,
    ROW_COLUMNS,
    PolicyPass,
    column,
    real_rows,
    response_rows,
)

COMPLETION_MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
TOOL_MASK = torch.tensor([[1, 0, 1, 0], [1, 1, 0, 0]])  # response 0's second token is a tool output
PER_TOKEN_ADVANTAGES = torch.tensor([[1.0, 3.0, 5.0, 7.0], [-2.0, -2.0, 9.0, 9.0]])


@pytest.mark.parametrize(
    ("advantages", "entropies", "expected"),
    [
        (
            PER_TOKEN_ADVANTAGES,
            torch.full((2, 4), 0.5),
            # the advantage and entropy are over scored tokens (tool output left out), length is not
            {"advantage": [3.0, -2.0], "entropy_sum": [1.0, 1.0]},
        ),
        (torch.tensor([0.7, -0.7]), None, {"advantage": [0.7, -0.7], "entropy_sum": [0.0, 0.0]}),
    ],
    ids=["per-token advantages, entropies", "per-response advantages, no entropies"],
)
def test_each_field_is_its_named_column(advantages, entropies, expected):
    batch = PolicyPass(
        log_s=torch.tensor([0.1, -0.2], dtype=torch.float64),
        scored_mask=COMPLETION_MASK * TOOL_MASK,
        completion_mask=COMPLETION_MASK,
        advantages=advantages,
        entropies=entropies,
    )
    rows = response_rows(batch)
    assert rows.dtype == torch.float32 and rows.shape == (2, len(ROW_COLUMNS))
    expected = {"log_ratio": [0.1, -0.2], "length": [3, 2], "tokens": [2, 2], "valid": [1, 1], **expected}
    assert set(expected) == set(RESPONSE_FIELDS) == set(ROW_COLUMNS)
    for name, values in expected.items():
        assert column(rows, name).tolist() == pytest.approx(values), name
    padded = torch.cat([rows, torch.zeros(3, len(ROW_COLUMNS))])  # what a gather adds to even out ranks
    assert torch.equal(real_rows(padded), rows)
    assert column(padded.numpy(), "length").tolist() == [3, 2, 0, 0, 0]  # arrays read by name too
