"""Silence the one resume warning that is expected: missing tied copies of the embeddings."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

MISSING_KEYS_PREFIX = "There were missing keys in the checkpoint model loaded: "


class TiedWeightsFilter(logging.Filter):
    """Drops transformers' "missing keys ['lm_head.weight']" warning on resume, and only it.

    A model with tied embeddings saves the shared matrix once, so its checkpoint lacks the
    tied copies by design; the Trainer still warns (its ignore list is empty for these
    models). Any other missing key is a real problem and passes through.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        config = getattr(model, "config", None)
        tied = getattr(model, "_tied_weights_keys", None) or {}
        self.tied = set(tied) if getattr(config, "tie_word_embeddings", False) else set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(MISSING_KEYS_PREFIX) or not self.tied:
            return True
        import ast

        try:
            missing = ast.literal_eval(message[len(MISSING_KEYS_PREFIX) :].rstrip("."))
        except (ValueError, SyntaxError):
            return True
        # PEFT and DDP wrappers prefix the names (base_model.model.lm_head.weight)
        return not all(any(key == t or key.endswith("." + t) for t in self.tied) for key in missing)


@contextlib.contextmanager
def quiet_tied_weights_warning(model: Any) -> Iterator[TiedWeightsFilter]:
    """TiedWeightsFilter on transformers' trainer logger for the duration of the block."""
    log_filter = TiedWeightsFilter(model)
    trainer_logger = logging.getLogger("transformers.trainer")
    trainer_logger.addFilter(log_filter)
    try:
        yield log_filter
    finally:
        trainer_logger.removeFilter(log_filter)
