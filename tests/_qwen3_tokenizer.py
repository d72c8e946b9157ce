"""The tiny CPU model with Qwen3's real chat template, for tests of template-dependent behaviour.

The tiny model's own template (gspo_trl.model.tiny.dense.CHATML_TEMPLATE) is ChatML without Qwen3's
thinking switch, and the demo keeps it: its behaviour and score must not change. Tests that
must see what a Qwen3 checkpoint does with `chat_template_kwargs` (`enable_thinking: false`
ends the generation prompt in an empty think block) use this copy instead. The template is
TRL's stored copy of Qwen3's (trl/chat_templates/qwen3.jinja, exposed as
trl.chat_template_utils.qwen3_chat_template, "Original Qwen3 chat template" in its README):
nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

from gspo_trl.model.tiny.dense import save_tiny_model

QWEN3_NO_THINK_GENERATION_PROMPT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
"""How qwen3.jinja ends a prompt when `enable_thinking` is false (its last lines)."""


def qwen3_template_model_dir(root: Path) -> Path:
    """Build (once per directory) the tiny model under `root/tiny-qwen3`, its tokenizer
    carrying Qwen3's chat template."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen3_chat_template

    path = root / "tiny-qwen3"
    if not (path / "config.json").exists():
        save_tiny_model(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        tokenizer.chat_template = qwen3_chat_template
        tokenizer.save_pretrained(path)
    return path
