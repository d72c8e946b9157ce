"""The recipe's `model:` section: which checkpoint, how to load it, its tokenizer and LoRA.

The model itself is loaded by TRL (GRPOTrainer takes a path plus `model_init_kwargs`), so
that DeepSpeed ZeRO-3 init, device placement and PEFT wrapping stay TRL's and accelerate's
job. This module only resolves the path (building the tiny CPU model when asked for
`tiny`), prepares the tokenizer and its chat template, and turns `lora:` into a LoraConfig.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from gspo_trl.config.sections import TINY, TINY_MODEL_DIR, ModelConfig
from gspo_trl.core.errors import ModelConfigError
from gspo_trl.model.loading.hub import hub_model_errors
from gspo_trl.model.tiny.dense import save_tiny_model

logger = logging.getLogger(__name__)


def resolve_model_path(config: ModelConfig, output_dir: str | Path) -> str:
    """The path or hub id TRL should load; builds the tiny model once when asked for `tiny`."""
    if config.name_or_path != TINY:
        return config.name_or_path
    from accelerate import PartialState

    tiny_dir = Path(output_dir) / TINY_MODEL_DIR
    with PartialState().main_process_first():  # one rank builds it; the others then read it
        if not (tiny_dir / "config.json").exists():
            logger.info("Building the tiny CPU model in %s", tiny_dir)
            save_tiny_model(tiny_dir)
    return str(tiny_dir)


def model_init_kwargs(config: ModelConfig) -> dict[str, Any]:
    """GRPOConfig.model_init_kwargs for the recipe's model section."""
    kwargs: dict[str, Any] = dict(config.extra_init_kwargs)
    for key in ("revision", "dtype", "attn_implementation"):
        value = getattr(config, key)
        if value is not None:
            kwargs[key] = value
    if config.trust_remote_code:
        kwargs["trust_remote_code"] = True
    return kwargs


def load_tokenizer(config: ModelConfig, model_path: str, setting: str = "model.name_or_path") -> Any:
    """The model's tokenizer, with the recipe's chat template if it sets one; a hub model that
    cannot be had is one error naming `setting` (gspo_trl.model.loading.hub)."""
    from transformers import AutoTokenizer

    with hub_model_errors(model_path, setting):
        tokenizer = AutoTokenizer.from_pretrained(
            model_path, revision=config.revision, trust_remote_code=config.trust_remote_code
        )
    if config.chat_template:
        template = config.chat_template
        if template.endswith(".jinja"):
            path = Path(template)
            if not path.is_file():
                raise ModelConfigError(f"model.chat_template: file {template!r} does not exist")
            template = path.read_text(encoding="utf-8")
        tokenizer.chat_template = template
    if tokenizer.chat_template is None:
        raise ModelConfigError(
            f"model.chat_template: the tokenizer of {model_path!r} has no chat template; "
            "set model.chat_template to a Jinja template or a .jinja file"
        )
    return tokenizer


def lora_config(config: ModelConfig) -> Any:
    """A peft.LoraConfig from `model.lora`, or None for full fine-tuning."""
    if config.lora is None:
        return None
    from peft import LoraConfig

    params = {"task_type": "CAUSAL_LM", **config.lora}
    try:
        return LoraConfig(**params)
    except TypeError as error:
        raise ModelConfigError(f"model.lora: {error}") from error
