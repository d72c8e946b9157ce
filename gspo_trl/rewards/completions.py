"""Text of a completion, whatever shape TRL hands it over in.

TRL passes plain strings for standard datasets and lists of chat messages
(``[{"role": "assistant", "content": ...}]``) for conversational ones. Every reward
reads completions through :func:`completion_text` so each works with both.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)


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


def completion_tokens(
    reward: str, completions: Sequence[Any] | None, completion_ids: Sequence[Any] | None
) -> list[list[Any]]:
    """Each completion's tokens: TRL's ``completion_ids`` when given (lists, tuples or
    tensors of ids, as TRL's own length rewards accept them), else its whitespace words.

    TRL passes ``completion_ids`` to every reward function in training, so words are only
    for direct calls (offline scoring, tests); they count differently from tokens, so the
    fallback is logged once per reward, never silent.
    """
    if completion_ids is not None:
        if completions is not None and len(completion_ids) != len(completions):
            raise ValueError(
                f"{reward}: got {len(completion_ids)} completion_ids for {len(completions)} completions"
            )
        return [ids.tolist() if hasattr(ids, "tolist") else list(ids) for ids in completion_ids]
    if completions is None:
        raise ValueError(f"{reward}: needs completion_ids (TRL passes them in training) or completions")
    if reward not in _WARNED_WORDS:
        _WARNED_WORDS.add(reward)
        log.warning(
            "%s: no completion_ids given, so lengths and n-grams are whitespace words, not tokens "
            "(TRL passes completion_ids in training; pass them when scoring offline)",
            reward,
        )
    return [t.split() for t in completion_texts(completions)]


_WARNED_WORDS: set[str] = set()
