"""OUTPUT_DIR/metrics.jsonl: every log event of a run with all its keys, one JSON object a line.

The console shows a few numbers per step; trackers hold everything only where one is
configured. This file always does, so `gspo-trl report` and a user's own scripts can read a
run's full history without a tracker (non-finite values become null).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TextIO

from transformers import TrainerCallback

from gspo_trl.core.metric_names import METRICS_FILE


class MetricsFileCallback(TrainerCallback):
    """Appends every log event, all keys, to OUTPUT_DIR/metrics.jsonl (main process only).

    A fresh run (step 0 at the start) truncates the file; a resumed run appends to it. The file
    stays open from on_train_begin to on_train_end (`close`; opening it for each event cost more
    than writing it) and each line is flushed as it is written, so a reader sees every event at
    once, and a run that dies loses none.
    """

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / METRICS_FILE
        self._file: TextIO | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.close()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w" if state.global_step == 0 else "a", encoding="utf-8")

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        entry = {"step": state.global_step, **{k: _jsonable(v) for k, v in logs.items()}}
        line = json.dumps(entry) + "\n"
        if self._file is None:  # a log outside train(): an evaluate() of its own, the final score
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line)
            return
        self._file.write(line)
        self._file.flush()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (later events open it for their line); also when training raised."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)
