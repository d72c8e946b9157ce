"""One held-out evaluation by HeldoutCallback on a real GSPOTrainer, in 1 or 2 processes.

    python tests/_heldout_dist_run.py OUT_DIR MODEL_DIR
    accelerate launch --multi_gpu --num_processes 2 ... tests/_heldout_dist_run.py OUT_DIR MODEL_DIR

Each rank writes OUT_DIR/rank<i>.json: the prompts its grader saw and the logged entries.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _gspo_helpers import make_trainer
from datasets import Dataset

from gspo_trl.training.heldout.scoring import HeldoutCallback, HeldoutSettings

ROWS = 11  # odd, so the two shards differ in size


def main() -> None:
    out, model_dir = Path(sys.argv[1]), Path(sys.argv[2])
    trainer = make_trainer(model_dir, out / "run")
    seen: list[str] = []

    def grader(completions: list[str], prompts: list[Any], **_: Any) -> list[float]:
        seen.extend(p[-1]["content"] for p in prompts)
        return [min(len(c), 40) / 40.0 for c in completions]

    rows = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"reverse {i:03d}"}]} for i in range(ROWS)]
    )
    settings = HeldoutSettings(max_rows=ROWS, temperature=0.0, max_new_tokens=8, ks=(1, 2))
    callback = HeldoutCallback(trainer, rows, grader, settings)
    logs = callback.evaluate()
    rank = trainer.accelerator.process_index
    record = {"world": trainer.accelerator.num_processes, "seen": seen, "logs": logs}
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    from gspo_trl.train import release_process_group

    release_process_group()  # left to interpreter exit, gloo aborted a finished 2-rank run in CI


if __name__ == "__main__":
    main()
