"""OUTPUT_DIR/metrics.jsonl: every log event of a run with all its keys, one JSON object a line.

The console shows a few numbers per step; trackers hold everything only where one is
configured. This file always does, so `gspo-trl report` and a user's own scripts can read a
run's full history without a tracker (non-finite values become null).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from gspo_trl.core.metric_names import METRICS_FILE


class MetricsFileCallback(TrainerCallback):
    """Appends every log event, all keys, to OUTPUT_DIR/metrics.jsonl (main process only).

    A fresh run (step 0 at the start) truncates the file; a resumed run appends to it.
    """

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / METRICS_FILE

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if state.global_step == 0:
                self.path.write_text("", encoding="utf-8")

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        entry = {"step": state.global_step, **{k: _jsonable(v) for k, v in logs.items()}}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)
