"""The rows of TRL's scored rollout dict, as dynamic sampling moves them: padded to one width, the
kept rows gathered from the ranks that hold them, and this rank's share cut back out.

TRL's `_generate_and_score_completions` returns this rank's rows, prompts left-padded and
completions right-padded to the widest row of that one call (`completion_ids = pad(`, with
`padding_side="right"`, trl/trainer/grpo_trainer.py:2454-2459; the prompts'
`padding_side="left"`, :2443-2448),
so two calls (two generation rounds, or two ranks) have different widths. Each key has a layout
saying which of its dimensions runs over the prompt, the completion or both, and what pads it.
TRL's keys are listed here; a probe declares the keys it adds (`Probe.rollout_layouts`). A key not
listed is refused by name (a multimodal batch's pixel values): moving it silently would misalign
it with its rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Layout:
    """`dim`: the dimension over tokens (None: one value per row); `span`: what it runs over
    (`prompt`, left-padded; `completion`, right-padded; `sequence`, the prompt then the
    completion); `pad`: the value padding writes (`pad_token`: the tokenizer's pad id)."""

    dim: int | None
    span: str = "row"
    pad: float | str = 0


ROW = Layout(None)
LAYOUTS = {
    "prompt_ids": Layout(1, "prompt", "pad_token"),
    "prompt_mask": Layout(1, "prompt"),
    "completion_ids": Layout(1, "completion", "pad_token"),
    "completion_mask": Layout(1, "completion"),
    "tool_mask": Layout(1, "completion", 1),  # TRL pads it with 1 (grpo_trainer.py:2481-2482)
    "old_per_token_logps": Layout(1, "completion"),
    "ref_per_token_logps": Layout(1, "completion"),
    "sampling_per_token_logps": Layout(1, "completion"),
    "importance_sampling_ratio": Layout(1, "completion"),  # (B, C), or (B, 1) at sequence level
    "advantages": ROW,
}
"""TRL's own rollout keys; a probe's are its `rollout_layouts`."""
BATCH_TOTALS = ("num_items_in_batch",)
"""Scalars over the whole rollout batch, all ranks (TRL's token count the dapo loss divides by)."""


class RolloutKeyError(RuntimeError):
    """A rollout key dynamic sampling cannot move with its rows."""


def widths(batch: dict[str, Any]) -> tuple[int, int]:
    """(prompt width P, completion width C) of one rollout dict."""
    return batch["prompt_ids"].size(1), batch["completion_ids"].size(1)


def _layout(key: str, value: Any, completion_width: int, layouts: Mapping[str, Layout]) -> Layout:
    layout = layouts.get(key)
    if layout is None:
        raise RolloutKeyError(
            f"dynamic sampling cannot move the rollout key {key!r} with its rows (known: "
            f"{', '.join(sorted(layouts))}); turn sampling.dynamic off for this run"
        )
    if key == "importance_sampling_ratio" and (value.dim() < 2 or value.size(1) != completion_width):
        return ROW  # sequence-level correction: one ratio per row
    return layout


def pad_to(
    batch: dict[str, Any],
    prompt_width: int,
    completion_width: int,
    pad_token: int,
    layouts: Mapping[str, Layout] = LAYOUTS,
) -> dict[str, Any]:
    """Every row tensor of `batch` padded to `prompt_width` x `completion_width` tokens (`layouts`:
    TRL's keys and the probes')."""
    own_prompt, own_completion = widths(batch)
    left, right = prompt_width - own_prompt, completion_width - own_completion
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if key in BATCH_TOTALS:
            continue
        layout = _layout(key, value, own_completion, layouts)
        if layout.dim is None or (left == 0 and right == 0):
            out[key] = value
            continue
        before = left if layout.span in ("prompt", "sequence") else 0
        after = right if layout.span in ("completion", "sequence") else 0
        fill = pad_token if layout.pad == "pad_token" else layout.pad
        out[key] = _pad(value, layout.dim, before, after, fill)
    return out


def _pad(tensor: torch.Tensor, dim: int, before: int, after: int, fill: float) -> torch.Tensor:
    if before == 0 and after == 0:
        return tensor
    parts = []
    for width in (before, after):
        shape = list(tensor.shape)
        shape[dim] = width
        parts.append(tensor.new_full(shape, fill))
    return torch.cat([parts[0], tensor, parts[1]], dim=dim)


def concat(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Row tensors of same-width dicts, one after the other."""
    return {key: torch.cat([b[key] for b in batches]) for key in batches[0]}


def take(batch: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
    """The given rows (a LongTensor of indices) of every row tensor."""
    return {key: value[rows.to(value.device)] for key, value in batch.items()}


def trim(batch: dict[str, Any], layouts: Mapping[str, Layout] = LAYOUTS) -> dict[str, Any]:
    """Drop the prompt columns no row uses (left) and the completion columns no row uses
    (right): rows cut out of a wider batch keep only the width they need."""
    completion_width = widths(batch)[1]
    used_prompt = int(batch["prompt_mask"].sum(0).nonzero().min()) if batch["prompt_mask"].any() else 0
    used_completion = batch["completion_mask"].sum(0).nonzero()
    keep_completion = int(used_completion.max()) + 1 if used_completion.numel() else 1
    left, right = used_prompt, completion_width - keep_completion
    if left == 0 and right == 0:
        return batch
    out = {}
    for key, value in batch.items():
        layout = _layout(key, value, completion_width, layouts)
        if layout.dim is None:
            out[key] = value
            continue
        start = left if layout.span in ("prompt", "sequence") else 0
        end = value.size(layout.dim) - (right if layout.span in ("completion", "sequence") else 0)
        out[key] = value.narrow(layout.dim, start, end - start)
    return out


GATHER_AS = {torch.int16: torch.int32, torch.uint16: torch.int32}
"""Row dtypes the all-gather lacks, and the wider one each travels as (exact; cast back after):
engine routing's expert ids are int16 (gspo_trl.model.routing.engine.ROUTING_DTYPE), and gloo
refuses them (`Invalid scalar type` for int16 and uint16, torch 2.13, two gloo ranks), as NCCL
would (its ncclDataType_t has no 16-bit integer)."""


def gather(accelerator: Any, tensor: torch.Tensor) -> torch.Tensor:
    """`accelerator.gather(tensor)` (every rank's rows, in rank order) for any row dtype."""
    wire = GATHER_AS.get(tensor.dtype)
    if wire is None:
        return accelerator.gather(tensor)
    return accelerator.gather(tensor.to(wire)).to(tensor.dtype)


def loss_tokens(batch: dict[str, Any]) -> torch.Tensor:
    """TRL's `num_items_in_batch` for these rows: the tokens the loss scores
    (`loss_mask = completion_mask * tool_mask`, summed, grpo_trainer.py:2497-2498)."""
    mask = batch["completion_mask"]
    if "tool_mask" in batch:
        mask = mask * batch["tool_mask"]
    return mask.sum()
