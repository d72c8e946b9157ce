"""Text of a completion, whatever shape TRL hands it over in.

TRL passes plain strings for standard datasets and lists of chat messages
(``[{"role": "assistant", "content": ...}]``) for conversational ones. Every reward
reads completions through :func:`completion_text` so each works with both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def completion_text(completion: Any) -> str:
    """Return the assistant text of one completion.

    A chat completion may hold several messages (tool calls, multi-turn rollouts); their
    ``content`` fields are joined with newlines, and ``content`` given as a list of typed
    parts (``{"type": "text", "text": ...}``) is flattened to its text parts. ``None``
    reads as the empty string so that a missing completion scores as wrong, not as a crash.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, Sequence):
        return "\n".join(_content_text(m.get("content") if isinstance(m, dict) else m) for m in completion)
    raise TypeError(
        f"cannot read a completion of type {type(completion).__name__}: "
        "expected a string or a list of chat messages with a 'content' field"
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def completion_texts(completions: Sequence[Any]) -> list[str]:
    """:func:`completion_text` over a batch."""
    return [completion_text(c) for c in completions]


def completion_lengths(texts: Sequence[str], completion_ids: Sequence[Sequence[int]] | None) -> list[int]:
    """Length of each completion in tokens when TRL passed ``completion_ids``, else in words.

    TRL always passes ``completion_ids`` to reward functions during training; the word
    count is only the fallback for direct calls (tests, offline scoring).
    """
    if completion_ids is not None:
        if len(completion_ids) != len(texts):
            raise ValueError(f"got {len(completion_ids)} completion_ids for {len(texts)} completions")
        return [len(ids) for ids in completion_ids]
    return [len(t.split()) for t in texts]
