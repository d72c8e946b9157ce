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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import datasets
from datasets import Dataset

from gspo_trl.data.synthetic import ReversalTask, make_warm_start_rows
from gspo_trl.training.reporting.step_progress import StepProgressBar

logger = logging.getLogger(__name__)
CACHE_KEY_FILE = "warm_start.json"


def warm_start_conversations(n: int, seed: int, task: ReversalTask) -> list[dict[str, Any]]:
    """Conversational prompt/completion rows: the format SFTTrainer trains on completions only."""
    return [
        {
            "prompt": [{"role": "user", "content": row["prompt"]}],
            "completion": [{"role": "assistant", "content": row["completion"]}],
        }
        for row in make_warm_start_rows(n, seed, task)
    ]


def tokenize_conversations(conversations: list[dict[str, Any]], tokenizer: Any) -> Dataset:
    """`input_ids` and `labels` (-100 on the prompt), as SFTTrainer makes them, in two batched calls.

    SFTTrainer tokenizes a prompt/completion row by rendering the chat template twice (the prompt
    with the generation prompt, then prompt + completion; `add_generation_prompt=True`,
    trl/trainer/sft_trainer.py:1314-1352),
    takes the completion to start where the two diverge (`common_prefix_length`, :1352) and masks
    the rest out of the loss (:1367, labels at :1421-1424), one row at a time through four
    `Dataset.map` passes. Given `input_ids` and `labels` it skips all of that (:1248, :1412).
    Building SFTTrainer on 19,200 rows took 7.6-9.2 s of CPU that way and 3.3-4.2 s this way
    (two alternating pairs, 1 thread, load 4-5). tests/demo/test_warm_start.py checks that both
    ways give the same rows.
    """
    from trl.data_utils import common_prefix_length

    prompts = tokenizer.apply_chat_template(
        [row["prompt"] for row in conversations], add_generation_prompt=True, tokenize=True
    )["input_ids"]
    full = tokenizer.apply_chat_template(
        [row["prompt"] + row["completion"] for row in conversations], tokenize=True
    )["input_ids"]
    labels = []
    for prompt, ids in zip(prompts, full, strict=True):
        start = common_prefix_length(prompt, ids)
        labels.append([-100] * start + ids[start:])
    return Dataset.from_dict({"input_ids": full, "labels": labels})


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


@dataclass(frozen=True)
class WarmStartSettings:
    """Every setting of the warm-start SFT; all of them are in the cache key (`warm_start_key`).

    Each step sees `batch_size` new rows (steps x batch_size distinct rows: with 4,000 rows seen
    ~5 times over, GSPO ended lower on 2 of 3 seeds). The defaults are the demo's: on its model
    (pipeline.DEMO_MODEL), the held-out gain after the tiny recipe's GSPO, seeds 0-4 (model, data
    and GSPO seeded together), was +0.84 to +0.935 after 800 steps, +0.68 to +0.885 after 600,
    and +0.41 to +0.805 after 400 (seeds 0-2). At lr 2e-3 the mean gain was +0.73 against +0.79
    at 3e-3 (600 steps, seeds 0-2). Fewer steps at a larger batch learnt less per row (default
    shape, 150 steps at 64: SFT loss 0.51; 300 at 32: 0.17-0.28). These were one-off runs made
    while choosing the defaults, with the seeds changed by hand: no shipped command repeats them.
    scripts/time_demo.sh measures the demo as shipped (seed 0).
    """

    steps: int = 800
    batch_size: int = 32
    learning_rate: float = 3e-3
    lr_scheduler_type: str = "cosine"
    warmup_steps: int = 20
    """Linear warmup; at most a tenth of `steps` (a 5-step smoke run gets none)."""
    seed: int = 0


def warm_start(
    model_dir: str | Path,
    output_dir: str | Path,
    task: ReversalTask,
    settings: WarmStartSettings = WarmStartSettings(),
) -> Path:
    """Fine-tune `model_dir` on the flawed warm-start data as `settings` say; save to `output_dir`.

    Returns at once when `output_dir` holds a warm start made from the same inputs (see
    `warm_start_key`).
    """
    from transformers import AutoTokenizer
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    key = warm_start_key(model_dir, task, asdict(settings))
    key_file = Path(output_dir) / CACHE_KEY_FILE
    if key_file.is_file() and json.loads(key_file.read_text()).get("key") == key:
        logger.info("warm start: reusing %s (same base model, task and settings)", output_dir)
        return Path(output_dir)
    key_file.unlink(missing_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    steps = settings.steps
    config = SFTConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_scheduler_type,
        warmup_steps=min(settings.warmup_steps, steps // 10),
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=settings.seed,
        disable_tqdm=True,
        # The rows come tokenized, and are far shorter than any limit: without a max_length
        # SFTTrainer skips its truncating and filtering passes over them
        # (`if args.max_length is not None and not packing:`, sft_trainer.py:1439).
        max_length=None,
        # TRL turns gradient checkpointing on by default
        # (`gradient_checkpointing: bool = field(default=True`, trl/trainer/base_config.py:62-63):
        # a third more compute for memory a model of a few MB does not need. Off, the same 1000
        # steps take ~30% less time.
        gradient_checkpointing=False,
    )
    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # any dataset pass SFTTrainer still makes: no bar before the SFT's
    try:
        trainer = SFTTrainer(
            model=str(model_dir),
            processing_class=tokenizer,
            train_dataset=tokenize_conversations(
                warm_start_conversations(steps * settings.batch_size, settings.seed + 1, task), tokenizer
            ),
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
    key_file.write_text(json.dumps({"key": key, **asdict(settings)}) + "\n", encoding="utf-8")
    return Path(output_dir)
