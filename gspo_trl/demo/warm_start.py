"""Warm start (cold-start SFT) for the tiny model, with TRL's SFTTrainer.

GSPO, like GRPO, is run after a supervised cold start: a policy that never produces a
right answer gets no signal from a verifier. The demo's warm-start data is deliberately
imperfect (see gspo_trl.data.synthetic), so the verifier has something to fix.

The result is cached: `output_dir/warm_start.json` records a hash of everything that decides
the weights (the base model's files, the task, the SFT settings, the library versions), and
a second run with the same hash reuses the saved model instead of training again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import datasets
from datasets import Dataset

from gspo_trl.data.synthetic import ReversalTask, make_warm_start_rows
from gspo_trl.training.reporting.step_progress import StepProgressBar

logger = logging.getLogger(__name__)
CACHE_KEY_FILE = "warm_start.json"


def warm_start_rows(n: int, seed: int, task: ReversalTask) -> Dataset:
    """Conversational prompt/completion rows, the format SFTTrainer trains on completions only."""
    rows = [
        {
            "prompt": [{"role": "user", "content": row["prompt"]}],
            "completion": [{"role": "assistant", "content": row["completion"]}],
        }
        for row in make_warm_start_rows(n, seed, task)
    ]
    return Dataset.from_list(rows)


def warm_start_key(model_dir: str | Path, task: ReversalTask, settings: dict[str, Any]) -> str:
    """sha256 over the base model's files, the task, the SFT settings and library versions."""
    import torch
    import transformers
    import trl

    digest = hashlib.sha256()
    for path in sorted(p for p in Path(model_dir).rglob("*") if p.is_file()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}
    text = json.dumps({"task": asdict(task), "settings": settings, "versions": versions}, sort_keys=True)
    digest.update(text.encode())
    return digest.hexdigest()


def warm_start(
    model_dir: str | Path,
    output_dir: str | Path,
    task: ReversalTask,
    steps: int,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    seed: int = 0,
) -> Path:
    """Fine-tune `model_dir` on the flawed warm-start data for `steps` steps; save to `output_dir`.

    Returns at once when `output_dir` holds a warm start made from the same inputs (see
    `warm_start_key`).
    """
    from transformers import AutoTokenizer
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    settings = {"steps": steps, "batch_size": batch_size, "learning_rate": learning_rate, "seed": seed}
    key = warm_start_key(model_dir, task, settings)
    key_file = Path(output_dir) / CACHE_KEY_FILE
    if key_file.is_file() and json.loads(key_file.read_text()).get("key") == key:
        logger.info("warm start: reusing %s (same base model, task and settings)", output_dir)
        return Path(output_dir)
    key_file.unlink(missing_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = SFTConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=min(20, steps // 10),
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=seed,
        disable_tqdm=True,
        # TRL turns gradient checkpointing on by default (trl/trainer/base_config.py:
        # `gradient_checkpointing: bool = field(default=True`): a third more compute for memory
        # a model of a few MB does not need. Off, the same 1000 steps take ~30% less time.
        gradient_checkpointing=False,
    )
    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # four tokenizing bars over 32k rows would bury the SFT bar
    try:
        trainer = SFTTrainer(
            model=str(model_dir),
            processing_class=tokenizer,
            train_dataset=warm_start_rows(steps * batch_size, seed + 1, task),
            args=config,
            callbacks=[StepProgressBar("warm-start SFT")],
        )
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    key_file.write_text(json.dumps({"key": key, **settings}) + "\n", encoding="utf-8")
    return Path(output_dir)
