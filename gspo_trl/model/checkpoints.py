"""Finding a run's checkpoints: one resolver for resume, evaluation and reports.

The Trainer writes `OUTPUT_DIR/checkpoint-N/` and its `trainer_state.json` last, so a run
killed while saving leaves a newer folder without it. Each caller asks for the newest
checkpoint that holds the file it needs (`trainer_state.json` to resume or plot,
`config.json` to load a model); folders without it are skipped, with a warning naming them.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
"""transformers' own naming (trainer_utils.PREFIX_CHECKPOINT_DIR + '-' + step)."""
TRAINER_STATE = "trainer_state.json"
MODEL_CONFIG = "config.json"


def checkpoints_newest_first(run_dir: str | Path) -> list[Path]:
    """`checkpoint-N` folders of a run, highest N first (empty when `run_dir` is no folder)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return []
    numbered = [(p, CHECKPOINT_NAME.match(p.name)) for p in folder.iterdir() if p.is_dir()]
    return [p for p, match in sorted(((p, m) for p, m in numbered if m), key=lambda pm: -int(pm[1].group(1)))]


def latest_checkpoint(run_dir: str | Path, needs: str = TRAINER_STATE, purpose: str = "") -> Path | None:
    """The newest checkpoint holding the file `needs`, or None; skipped newer ones are logged."""
    for checkpoint in checkpoints_newest_first(run_dir):
        if (checkpoint / needs).is_file():
            return checkpoint
        logger.warning(
            "%sskipping %s: incomplete (no %s)", f"{purpose}: " if purpose else "", checkpoint, needs
        )
    return None
