"""gspo_trl.training.rollout_rows: rows of two rollout dicts of different widths padded to one
width keep every token where TRL's forward reads it (prompts left-padded, completions right-padded,
the routing over both), and trimming gives back the original rows."""

from __future__ import annotations

import pytest
import torch

from gspo_trl.training import rollout_rows
from gspo_trl.training.probes.routing import ROUTED_EXPERTS, RoutingProbe

LAYOUTS = {**rollout_rows.LAYOUTS, **RoutingProbe.rollout_layouts}

PAD = 7


def rollout(prompt: list[int], completion: list[int]) -> dict[str, torch.Tensor]:
    """One row, no padding; its routing (2 layers, top-1) numbers each position from 1."""
    width = len(prompt) + len(completion)
    return {
        "prompt_ids": torch.tensor([prompt]),
        "prompt_mask": torch.ones(1, len(prompt), dtype=torch.long),
        "completion_ids": torch.tensor([completion]),
        "completion_mask": torch.ones(1, len(completion), dtype=torch.long),
        "old_per_token_logps": torch.full((1, len(completion)), -0.5),
        "advantages": torch.tensor([1.5]),
        ROUTED_EXPERTS: torch.arange(1, width + 1).repeat(2, 1).unsqueeze(0).unsqueeze(-1),
        "num_items_in_batch": torch.tensor(len(completion)),
    }


def test_pad_keeps_prompt_right_aligned_and_completion_left_aligned():
    short, wide = rollout([1, 2], [3]), rollout([1, 2, 3, 4], [5, 6, 7])
    padded = rollout_rows.pad_to(short, *rollout_rows.widths(wide), pad_token=PAD, layouts=LAYOUTS)
    assert padded["prompt_ids"].tolist() == [[PAD, PAD, 1, 2]]
    assert padded["prompt_mask"].tolist() == [[0, 0, 1, 1]]
    assert padded["completion_ids"].tolist() == [[3, PAD, PAD]]
    assert padded["completion_mask"].tolist() == [[1, 0, 0]]
    assert padded["old_per_token_logps"].tolist() == [[-0.5, 0.0, 0.0]]
    assert padded[ROUTED_EXPERTS][0, 0, :, 0].tolist() == [0, 0, 1, 2, 3, 0, 0]
    assert "num_items_in_batch" not in padded
    both = rollout_rows.concat([padded, rollout_rows.pad_to(wide, 4, 3, PAD, LAYOUTS)])
    assert both["prompt_ids"].shape == (2, 4) and both[ROUTED_EXPERTS].shape == (2, 2, 7, 1)
    back = rollout_rows.trim(rollout_rows.take(both, torch.tensor([0])), LAYOUTS)
    assert {k: v.tolist() for k, v in back.items()} == {
        k: v.tolist() for k, v in short.items() if k != "num_items_in_batch"
    }
    assert int(rollout_rows.loss_tokens(both)) == 4


def test_an_unknown_row_key_is_refused_by_name():
    batch = {**rollout([1], [2]), "pixel_values": torch.zeros(1, 3)}
    with pytest.raises(rollout_rows.RolloutKeyError, match="pixel_values"):
        rollout_rows.pad_to(batch, 2, 2, PAD, LAYOUTS)
