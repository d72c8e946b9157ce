"""Prompt token ids for generation, rendered exactly as TRL renders the training prompts.

GRPOTrainer._tokenize_prompts (trl/trainer/grpo_trainer.py, TRL 1.16) tokenizes a batch of
chat prompts with

    self.processing_class.apply_chat_template(conversation=prompts, tools=self.tools or None,
        chat_template=self.chat_template, add_generation_prompt=True, tokenize=True,
        return_dict=True, **self.chat_template_kwargs)

and plain-text prompts with `self.processing_class(text=prompts)`. Held-out evaluation,
`gspo-trl eval` and `gspo-trl filter` all prompt through `prompt_token_ids`, so the model is
asked what training asks it: with a recipe's `chat_template_kwargs: {enable_thinking: false}`,
Qwen3's template ends the prompt in an empty `<think>\\n\\n</think>\\n\\n` block; without the
keywords it ends in `<|im_start|>assistant\\n` and the model thinks, up to the length cap.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PromptRendering:
    """What, besides the tokenizer, decides a prompt's tokens: the GRPOConfig field
    `chat_template_kwargs`, and the trainer's tools and training chat template (TRL swaps
    in its own template only when tools are given)."""

    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    tools: Sequence[Any] | None = None
    chat_template: str | None = None

    @classmethod
    def of_trainer(cls, trainer: Any) -> PromptRendering:
        """The settings a (GRPO) trainer tokenizes its rollout prompts with."""
        return cls(
            dict(getattr(trainer, "chat_template_kwargs", None) or {}),
            getattr(trainer, "tools", None) or None,
            getattr(trainer, "chat_template", None),
        )

    @classmethod
    def of_training_keys(cls, training: Mapping[str, Any]) -> PromptRendering:
        """The settings of a recipe's GRPOConfig keys (`recipe.training`); a JSON string is
        read as TrainingArguments reads its dict fields."""
        kwargs = training.get("chat_template_kwargs") or {}
        if isinstance(kwargs, str):
            kwargs = json.loads(kwargs)
        return cls(dict(kwargs))


def prompt_token_ids(
    tokenizer: Any, prompts: Sequence[Any], rendering: PromptRendering | None = None
) -> list[list[int]]:
    """Token ids of each prompt, generation prompt included, as GRPOTrainer builds them
    (`rendering` None: no template keywords, no tools)."""
    if not prompts:
        return []
    rendering = rendering or PromptRendering()
    from trl.data_utils import is_conversational

    if not is_conversational({"prompt": prompts[0]}):
        return [list(ids) for ids in tokenizer(text=list(prompts))["input_ids"]]
    encoded = tokenizer.apply_chat_template(
        conversation=list(prompts),
        tools=rendering.tools or None,
        chat_template=rendering.chat_template,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        **rendering.chat_template_kwargs,
    )
    return [list(ids) for ids in encoded["input_ids"]]
