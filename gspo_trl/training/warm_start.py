"""Warm start (cold-start SFT) for the tiny model, with TRL's SFTTrainer.

GSPO, like GRPO, is run after a supervised cold start: a policy that never produces a
right answer gets no signal from a verifier. The demo's warm-start data is deliberately
imperfect (see gspo_trl.data.synthetic), so the verifier has something to fix.
"""

from __future__ import annotations

from pathlib import Path

from datasets import Dataset

from gspo_trl.data.synthetic import ReversalTask, make_warm_start_rows


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


def warm_start(
    model_dir: str | Path,
    output_dir: str | Path,
    task: ReversalTask,
    steps: int,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    seed: int = 0,
) -> Path:
    """Fine-tune `model_dir` on the flawed warm-start data for `steps` steps; save to `output_dir`."""
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

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
    )
    trainer = SFTTrainer(
        model=str(model_dir),
        processing_class=tokenizer,
        train_dataset=warm_start_rows(steps * batch_size, seed + 1, task),
        args=config,
    )
    trainer.train()
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    return Path(output_dir)
