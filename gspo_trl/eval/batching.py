"""How HF `generate` batches are cut: rows and a token budget (torch-free, so the plan reads it too)."""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_BATCH_SIZE = 64
"""Rows one HF `generate` batch may hold at most."""
DEFAULT_BATCH_TOKENS = 65536
"""Prompt + new tokens one HF `generate` batch may hold. The KV cache grows with it: Qwen3-4B/8B
keep ~144 KiB per token in bf16, so 65536 tokens is ~9 GiB, where 64 rows x 8k tokens is ~79 GB."""


def token_bounded_batches(
    prompt_lengths: Sequence[int],
    max_new_tokens: int,
    max_batch_tokens: int,
    max_batch_size: int = DEFAULT_BATCH_SIZE,
) -> list[range]:
    """Consecutive index ranges whose rows x (longest prompt + max_new_tokens) <= max_batch_tokens.

    A left-padded batch costs its longest prompt for every row, hence the max. A single row
    that alone exceeds the budget still gets a batch of its own (generation cannot be split).
    """
    batches: list[range] = []
    start, longest = 0, 0
    for index, length in enumerate(prompt_lengths):
        longest_with = max(longest, length)
        rows = index - start + 1
        if index > start and (
            rows > max_batch_size or rows * (longest_with + max_new_tokens) > max_batch_tokens
        ):
            batches.append(range(start, index))
            start, longest_with = index, length
        longest = longest_with
    if start < len(prompt_lengths):
        batches.append(range(start, len(prompt_lengths)))
    return batches
