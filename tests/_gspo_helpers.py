"""Shared helpers for the GSPO trainer tests: a tiny model on disk and a real trainer on CPU."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer
from trl import GRPOConfig

from gspo_trl.config.defaults import GSPO_DEFAULTS
from gspo_trl.model.tiny.dense import save_tiny_model

GSPO_ARGS: dict[str, Any] = dict(GSPO_DEFAULTS)
"""GSPO's settings as GRPOConfig keywords, from the package's one source of them."""


@pytest.fixture(scope="module", autouse=True)
def single_torch_thread():
    """One torch thread while a module's tiny trainers run, restored after.

    The tiny model's tensors are too small to split; on 2 cores shared with other jobs a second
    thread only spin-waits: a 6-step run took 43 s with 2 threads and 1.8 s with 1.
    Import this name into a test module to activate it there.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_model_dir(root: Path) -> Path:
    """Build (once per directory) the tiny Qwen3 model + tokenizer under `root/tiny`."""
    path = root / "tiny"
    if not (path / "config.json").exists():
        save_tiny_model(path)
    return path


def length_reward(completions: list[str], **_: Any) -> list[float]:
    """A reward with spread on random text: longer completions score higher (0-1)."""
    return [min(len(c), 40) / 40.0 for c in completions]


def make_trainer(
    model_dir: Path,
    output_dir: Path,
    trainer_cls: type | None = None,
    n_prompts: int = 64,
    trainer_kwargs: dict[str, Any] | None = None,
    eval_dataset: Any = None,
    probes: Sequence[Any] = (),
    prompts: Sequence[str] | None = None,
    **config: Any,
):
    """A real (GSPO)Trainer on the tiny model: CPU, no reporting, GSPO settings by default
    (`prompts`: the training prompts; default n_prompts short sums)."""
    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.trainer import GSPOTrainer

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        report_to="none",
        max_completion_length=12,
        num_generations=4,
        per_device_train_batch_size=8,
        max_steps=4,
        logging_steps=1,
        learning_rate=1e-3,
        save_strategy="no",
        seed=0,
        temperature=1.0,
        dataloader_num_workers=0,
    )
    args.update(GSPO_ARGS)
    args.update(config)
    texts = prompts if prompts is not None else [f"add {i} and {i + 3}" for i in range(n_prompts)]
    prompts = [{"prompt": text} for text in texts]
    cls = trainer_cls or GSPOTrainer
    if issubclass(cls, GSPOTrainer):  # GSPO's own settings (gspo_token, diagnostics) live in the config
        config_cls, gspo_fields = GSPOConfig, dict(trainer_kwargs or {})
        trainer_kwargs = {"probes": probes}
    else:
        config_cls, gspo_fields = GRPOConfig, {}
    return cls(
        model=str(model_dir),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=[length_reward],
        args=config_cls(**args, **gspo_fields),
        train_dataset=Dataset.from_list(prompts),
        eval_dataset=eval_dataset,
        **(trainer_kwargs or {}),
    )
