"""Padding-free rows: a padded (B, L) batch's real tokens packed into few sequences, and back.

TRL pads every minibatch to its longest prompt + completion (prompts on the left, completions on
the right) and runs the model on that rectangle. Packing keeps only the tokens the attention mask
marks, concatenates rows into sequences of at most `budget` tokens (first-fit, longest row first),
and restarts the position ids at 0 for each row: transformers then keeps attention within each
row (`find_packed_sequence_indices`, transformers/masking_utils.py:729-758: a new sequence starts
wherever `position_diff != 1`). A sequence shorter than the longest is filled with a *filler*
segment (positions 0, 1, ...) that attends only to itself and is never scored.

Everything here is index arithmetic on integer tensors (no model): `pack_rows` returns the layout,
`unpack` puts per-token values of the packed sequences back at their (row, column) in the padded
rectangle, zeros elsewhere (what TRL's fused head returns at unscored positions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedLayout:
    """Where each real token of a padded (rows, width) batch sits in the packed (N, W) one."""

    rows: int
    """B, rows of the padded batch."""
    width: int
    """L = P + C, columns of the padded batch."""
    input_ids: torch.Tensor
    """(N, W) the packed sequences (filler: token 0)."""
    position_ids: torch.Tensor
    """(N, W) positions, restarting at 0 for each row and each filler segment."""
    padded_index: torch.Tensor
    """(T,) flat index into rows x width of each real token, in packed order."""
    packed_index: torch.Tensor
    """(T,) flat index into N x W of the same tokens."""

    @property
    def tokens(self) -> int:
        """T, the real tokens (what the padded rectangle's rows x width wasted the rest of)."""
        return int(self.padded_index.numel())

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.input_ids.shape)  # type: ignore[return-value]


def bins_by_first_fit(lengths: list[int], budget: int) -> list[list[int]]:
    """Row indices grouped into bins of at most `budget` tokens, longest row first, each into the
    first bin it fits (first-fit decreasing: within 22% of the fewest bins); rows keep their
    order inside a bin. A row longer than the budget gets a bin of its own."""
    bins: list[list[int]] = []
    room: list[int] = []
    for row in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        length = lengths[row]
        slot = next((b for b, free in enumerate(room) if free >= length), None)
        if slot is None:
            bins.append([row])
            room.append(budget - length)
        else:
            bins[slot].append(row)
            room[slot] -= length
    return [sorted(b) for b in bins]


def packed_tokens(lengths: list[int], budget: int | None) -> int:
    """N x W, the tokens `pack_rows` would forward for rows of these lengths (no tensor built)."""
    if budget is None:
        return max(sum(lengths), 1)
    bins = bins_by_first_fit(lengths, max(budget, max(lengths, default=0)))
    return len(bins) * max(max((sum(lengths[r] for r in b) for b in bins), default=0), 1)


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, budget: int | None) -> PackedLayout:
    """The layout of a padded batch's real tokens (attention_mask 1) in packed sequences of at
    most `budget` tokens (None: every row in one sequence). Each row's tokens must be contiguous
    (TRL's left-padded prompt + right-padded completion are)."""
    rows, width = input_ids.shape
    device = input_ids.device
    mask = attention_mask.bool()
    lengths_t = mask.sum(dim=1)
    first = torch.where(lengths_t > 0, mask.int().argmax(dim=1), 0)
    last = width - 1 - mask.int().flip(1).argmax(dim=1)
    holes = (lengths_t > 0) & (last - first + 1 != lengths_t)
    if holes.any():
        row = int(holes.nonzero()[0])
        raise ValueError(
            f"packing: row {row}'s attention mask has holes; packing keeps positions only for "
            "contiguous rows (a left-padded prompt and a right-padded completion); set packing: false"
        )
    lengths = lengths_t.tolist()
    longest = max(lengths, default=0)
    bins = [list(range(rows))] if budget is None else bins_by_first_fit(lengths, max(budget, longest))
    fills = [sum(lengths[r] for r in b) for b in bins]
    packed_width = max(max(fills, default=0), 1)
    order, starts = [], []
    for n, members in enumerate(bins):
        offset = n * packed_width
        for row in members:
            order.append(row)
            starts.append(offset)
            offset += lengths[row]
    order_t = torch.tensor(order, dtype=torch.long, device=device)
    counts = lengths_t[order_t]
    total = int(counts.sum())
    row_start = torch.cumsum(counts, 0) - counts  # where each row begins in the (T,) token list
    within = torch.arange(total, device=device) - torch.repeat_interleave(row_start, counts)
    padded = torch.repeat_interleave(order_t * width + first[order_t], counts) + within
    packed = torch.repeat_interleave(torch.tensor(starts, dtype=torch.long, device=device), counts) + within
    columns = torch.arange(packed_width, device=device).expand(len(bins), -1)
    fill = torch.tensor(fills, dtype=torch.long, device=device)[:, None]
    positions = (columns - fill).clamp(min=0).reshape(-1)  # the filler after each sequence: 0, 1, ...
    positions[packed] = within
    ids = torch.zeros(len(bins) * packed_width, dtype=input_ids.dtype, device=device)
    ids[packed] = input_ids.reshape(-1)[padded]
    return PackedLayout(
        rows=rows,
        width=width,
        input_ids=ids.view(len(bins), packed_width),
        position_ids=positions.view(len(bins), packed_width),
        padded_index=padded,
        packed_index=packed,
    )


def to_packed(values: torch.Tensor, layout: PackedLayout, fill: int | float = 0) -> torch.Tensor:
    """A padded (B, L, ...) tensor's real tokens at their packed (N, W, ...) positions."""
    rows, width = layout.shape
    tail = values.shape[2:]
    out = values.new_full((rows * width, *tail), fill)
    out[layout.packed_index] = values.reshape(layout.rows * layout.width, *tail)[layout.padded_index]
    return out.view(rows, width, *tail)


def unpack(values: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """A packed (N, W, ...) tensor's real tokens back at their padded (B, L, ...) positions, zeros
    elsewhere; differentiable (the gradient flows back to the packed tensor's real tokens)."""
    tail = values.shape[2:]
    flat = values.reshape(-1, *tail)[layout.packed_index]
    out = values.new_zeros((layout.rows * layout.width, *tail))
    out = out.index_put((layout.padded_index,), flat)
    return out.view(layout.rows, layout.width, *tail)
