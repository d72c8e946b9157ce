"""A tiny Qwen3-style model and byte-level BPE tokenizer, built locally: the CPU default.

Nothing here touches a hub. The model is shaped like the real thing (Qwen3 architecture,
grouped-query attention, tied embeddings, a ChatML chat template) so that every code path a
user exercises on a 7B model on GPUs - chat templating, generation, TRL's GRPO loss, vLLM
loading - runs unchanged on it, in well under a second per training step on 2 CPU cores.
head_dim is 32 because vLLM's CPU attention backend refuses smaller heads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from gspo_trl.config.sections.tiny import TINY_MAX_POSITIONS

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML, as Qwen uses it, without Qwen3's thinking switch: the tiny model never thinks."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the tiny model. Defaults: ~0.9M parameters, 3 layers, 4 heads of 32."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = TINY_MAX_POSITIONS
    vocab_size: int = 512
    """Vocabulary the tokenizer is trained to (at most: the tiny corpus yields fewer merges)."""
    model_vocab_size: int | None = None
    """Rows of the embedding and LM head; None: len(tokenizer). A hub checkpoint's vocabulary runs
    past its tokenizer (Qwen3's config.json does); ids past the tokenizer decode to nothing."""
    initializer_range: float = 0.02
    seed: int = 0


def default_corpus() -> list[str]:
    """Text the tokenizer is trained on: digits, the tags rewards look for, chat words.

    Byte-level BPE can encode any string whatever the corpus; the corpus only decides which
    merges exist, i.e. how short common strings become.
    """
    words = (
        "reverse sort add sum the digits of answer think question solve compute what is "
        "<think> </think> <answer> </answer> \\boxed{ } + - = * / ( ) , . : ; "
        "system user assistant You are a helpful assistant. Reply with the answer only."
    )
    lines = [words] * 20
    lines += [" ".join(str((i * 7919) % 10**k) for i in range(50)) for k in range(1, 6)]
    lines += ["".join(str((i * j) % 10) for j in range(12)) for i in range(200)]
    return lines


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with ChatML special tokens and template.

    Byte-level (not char-level) so that spaces and newlines survive a save/load round trip.
    Digits are split one per token, as in Qwen's and Llama 3's tokenizers: arithmetic and
    digit-manipulation tasks are then learnable position by position.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast, spec: TinyModelSpec = TinyModelSpec()
) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3 causal LM sized by `spec`, matched to `tokenizer`."""
    import torch

    rows = spec.model_vocab_size or len(tokenizer)
    if rows < len(tokenizer):
        raise ValueError(
            f"model_vocab_size {rows} < the tokenizer's {len(tokenizer)} ids: give at least as many"
        )
    torch.manual_seed(spec.seed)
    config = Qwen3Config(
        vocab_size=rows,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        initializer_range=spec.initializer_range,
        **tokenizer_bound_config(tokenizer),
    )
    return with_tokenizer_generation(Qwen3ForCausalLM(config), tokenizer)


def tokenizer_bound_config(tokenizer: PreTrainedTokenizerFast) -> dict[str, Any]:
    """The config keys every tiny model (dense or MoE) takes from its tokenizer: its end and pad
    ids, no BOS (the ChatML template has none), tied embeddings, float32 weights."""
    return {
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "torch_dtype": "float32",
    }


def with_tokenizer_generation(model: Any, tokenizer: PreTrainedTokenizerFast) -> Any:
    """`model` with its generation config stopping and padding on `tokenizer`'s ids (a config
    built from scratch carries none, and generate would run to max_new_tokens)."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_tiny_model(
    output_dir: str | Path, spec: TinyModelSpec = TinyModelSpec(), device: str = "cpu", dtype: str = "float32"
) -> Path:
    """Build the tiny tokenizer and model and save both to `output_dir` (from_pretrained-ready);
    `device` is where the weights are initialised (a GPU for a full-size spec: the scripts'
    random Qwen3 models), `dtype` ("float32", "bfloat16") what they are saved in."""
    import torch

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(default_corpus(), spec.vocab_size)
    with torch.device(device):
        model = build_tiny_model(tokenizer, spec)
    model.to(getattr(torch, dtype)).save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir
