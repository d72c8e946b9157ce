"""Engine routing laid out like TRL's training batch (no engine: gspo_trl.model.routing.engine's tensor side).

Each token's "routing" here is its own id, so a batch laid out by `routing_batch` must show, at
every real column of TRL's `torch.cat([prompt_ids, completion_ids], dim=1)` (built with TRL's own
`pad`, as `_generate_and_score_completions` builds it), the id of the token in that column.
"""

from __future__ import annotations

from importlib.util import find_spec
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from trl.trainer.utils import pad

from gspo_trl.model.routing.engine import (
    ROUTING_DTYPE,
    SAMPLED_ROUTING_ATTR,
    completion_routing,
    engine_routing_unavailable_reason,
    routing_batch,
    take_sampled_routing,
    unknown_experts,
)

LAYERS, TOP_K = 3, 2


def engine_array(tokens: list[int]) -> np.ndarray:
    """What vLLM returns for a sequence: one row per token fed (all but the last), every layer
    and slot holding the token's id (slot 1: id + 1, so slot order is visible)."""
    fed = np.array(tokens[:-1], dtype=np.uint16)
    rows = np.stack([fed, fed + 1], axis=-1)  # (T - 1, top_k)
    return np.repeat(rows[:, None, :], LAYERS, axis=1)  # (T - 1, layers, top_k)


def trl_layout(prompts: list[list[int]], completions: list[list[int]], multiple: int | None):
    """TRL's tensors (grpo_trainer.py:2441-2461, :2501)."""
    prompt_ids = pad([torch.tensor(p) for p in prompts], 0, padding_side="left", pad_to_multiple_of=multiple)
    prompt_mask = pad(
        [torch.ones(len(p), dtype=torch.long) for p in prompts], 0, "left", pad_to_multiple_of=multiple
    )
    completion_ids = pad(
        [torch.tensor(c) for c in completions], 0, padding_side="right", pad_to_multiple_of=multiple
    )
    completion_mask = pad(
        [torch.ones(len(c), dtype=torch.long) for c in completions], 0, "right", pad_to_multiple_of=multiple
    )
    return prompt_ids, prompt_mask, completion_ids, completion_mask


CASES = {  # name: (prompt lengths, completion lengths, pad_to_multiple_of)
    "equal lengths": ([3, 3], [4, 4], None),
    "ragged prompts and completions": ([2, 5, 1], [6, 1, 3], None),
    "one-token completions": ([4, 2], [1, 1], None),
    "widths rounded up to a multiple": ([2, 5, 3], [3, 7, 1], 4),
    "single row": ([7], [5], 8),
}


@pytest.mark.parametrize("prompt_lengths, completion_lengths, multiple", CASES.values(), ids=CASES.keys())
def test_batch_layout_matches_trl_concatenation(prompt_lengths, completion_lengths, multiple):
    prompts = [[1000 * row + 1 + j for j in range(n)] for row, n in enumerate(prompt_lengths)]
    completions = [[1000 * row + 500 + j for j in range(n)] for row, n in enumerate(completion_lengths)]
    vllm_generation = SimpleNamespace(tensor_parallel_size=1)
    setattr(
        vllm_generation,
        SAMPLED_ROUTING_ATTR,
        [(len(p), engine_array(p + c)) for p, c in zip(prompts, completions, strict=True)],
    )
    routings = take_sampled_routing(vllm_generation, prompts, completions)
    prompt_ids, prompt_mask, completion_ids, completion_mask = trl_layout(prompts, completions, multiple)

    batch = routing_batch(routings, prompt_mask.sum(1).tolist(), prompt_ids.size(1), completion_ids.size(1))

    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1).bool()
    last = prompt_ids.size(1) + completion_mask.sum(1) - 1  # each row's last sampled token
    assert batch.shape == (len(prompts), LAYERS, ids.size(1), TOP_K) and batch.dtype == ROUTING_DTYPE
    for row in range(len(prompts)):
        for column in range(ids.size(1)):
            got = batch[row, :, column]
            if mask[row, column] and column != last[row]:
                token = int(ids[row, column])
                assert (got == torch.tensor([token, token + 1], dtype=ROUTING_DTYPE)).all(), (row, column)
            else:  # padding, and the last token (never fed back to the engine)
                assert (got == unknown_experts(TOP_K)).all(), (row, column)


def test_routing_is_taken_once_per_generate():
    vllm_generation = SimpleNamespace(tensor_parallel_size=1)
    setattr(vllm_generation, SAMPLED_ROUTING_ATTR, [(2, engine_array([1, 2, 3]))])
    take_sampled_routing(vllm_generation, [[1, 2]], [[3]])
    with pytest.raises(ValueError, match="no engine routing was kept"):
        take_sampled_routing(vllm_generation, [[1, 2]], [[3]])


BAD_ALIGNMENTS = {  # name: (kept (prompt length, tokens), prompts, completions, error)
    "fewer completions than kept": ([(2, [1, 2, 3])] * 2, [[1, 2]], [[3]], "for 2 completions"),
    "prompt length differs": ([(3, [1, 2, 3])], [[1, 2]], [[3]], "3-token prompt"),
    "completion longer than sampled": ([(2, [1, 2, 3])], [[1, 2]], [[3, 4]], r"expected \(3, layers"),
}


@pytest.mark.parametrize(
    "kept, prompts, completions, error", BAD_ALIGNMENTS.values(), ids=BAD_ALIGNMENTS.keys()
)
def test_misaligned_routing_is_refused(kept, prompts, completions, error):
    vllm_generation = SimpleNamespace(tensor_parallel_size=1)
    setattr(vllm_generation, SAMPLED_ROUTING_ATTR, [(n, engine_array(tokens)) for n, tokens in kept])
    with pytest.raises(ValueError, match=error):
        take_sampled_routing(vllm_generation, prompts, completions)


def test_routing_wider_than_the_padded_batch_is_refused():
    routing = completion_routing(engine_array([1, 2, 3, 4]), 2, 2)
    with pytest.raises(ValueError, match="do not fit the padded widths P=2, C=1"):
        routing_batch([routing], [2], 2, 1)


@pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed")
def test_colocated_vllm_cpu_returns_routing():
    from gspo_trl.model.vllm_cpu.shim import vllm_runs_on_cpu

    if not vllm_runs_on_cpu():
        pytest.skip("vLLM runs on a GPU here: its own routing output, checked by the engine itself")
    assert engine_routing_unavailable_reason() is None
