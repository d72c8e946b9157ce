"""The architecture numbers of a decoder-only transformer, as a Hugging Face `config.json` names them.

Parameter counts follow the Qwen3 / Qwen3-MoE modules in transformers: per decoder layer,
q/k/v/o projections without bias, a q_norm and a k_norm over `head_dim`, two RMSNorms over
`hidden_size`, and a SwiGLU MLP (gate, up, down) or, on MoE layers, a bias-free router plus
`num_experts` SwiGLU experts of width `moe_intermediate_size`. They reproduce the Qwen3 model
cards (e.g. Qwen3-8B "8.2B, 6.95B non-embedding") to within 2% (tests/plan).

Here, below both `gspo-trl plan` (which reads shipped or local config files) and the trainer
(which reads its live model's config), so both count FLOPs from the same shape
(gspo_trl.model.sizing.flops).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gspo_trl.core.errors import PlanError

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name such as `bfloat16` or `float32`."""
    try:
        return DTYPE_BYTES[dtype.removeprefix("torch.")]
    except KeyError:
        raise PlanError(f"unknown dtype {dtype!r}: use one of {sorted(DTYPE_BYTES)}") from None


@dataclass(frozen=True)
class ModelShape:
    """Decoder-only transformer dimensions (names as in `config.json`)."""

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool
    torch_dtype: str = "bfloat16"
    max_position_embeddings: int = 0
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    lora_adapter_params: int = 0
    """LoRA adapter parameters one token passes through when the base is frozen and only they
    train (0: full fine-tuning). Not part of config.json: the FLOP count of a LoRA run reads it
    (gspo_trl.model.sizing.flops.training_flops_per_token)."""

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, index: int) -> bool:
        """The Qwen3-MoE rule: sparse every `decoder_sparse_step` layers, except `mlp_only_layers`."""
        step = self.decoder_sparse_step
        return self.is_moe and step > 0 and (index + 1) % step == 0 and index not in self.mlp_only_layers

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))

    @property
    def attention_params(self) -> int:
        """q, k, v, o projections plus q_norm and k_norm, for one layer."""
        h = self.hidden_size
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + 2 * self.head_dim

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """One expert's SwiGLU MLP."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    def layer_params(self, index: int) -> int:
        """All parameters of decoder layer `index` (every expert counted)."""
        mlp = (
            self.num_experts * self.expert_params + self.router_params
            if self.is_moe_layer(index)
            else self.dense_mlp_params
        )
        return self.attention_params + mlp + 2 * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Separate LM-head parameters: zero when tied to the input embedding."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def non_embedding_params(self) -> int:
        """Decoder layers plus the final norm: the model cards' "non-embedding" figure."""
        return sum(self.layer_params(i) for i in range(self.num_layers)) + self.hidden_size

    @property
    def total_params(self) -> int:
        return self.non_embedding_params + self.embedding_params + self.lm_head_params

    @property
    def inactive_expert_params(self) -> int:
        """Expert weights a token does not route through (zero for dense models)."""
        per_layer = (self.num_experts - self.num_experts_per_tok) * self.expert_params
        return self.num_moe_layers * per_layer

    @property
    def active_params(self) -> int:
        """Parameters one token touches (the MoE cards' "activated"), embeddings included."""
        return self.total_params - self.inactive_expert_params

    @property
    def active_matmul_params(self) -> int:
        """Active parameters that do multiply-adds: the embedding lookup costs no FLOPs, the LM
        head (tied or not) is a `vocab x hidden` matmul. The N of the 6*N*T rule."""
        return self.non_embedding_params - self.inactive_expert_params + self.vocab_size * self.hidden_size

    def kv_bytes_per_token(self, bytes_per_element: int = 2) -> int:
        """KV-cache bytes one token occupies: K and V, every layer, every KV head (vLLM, Kwon et al.
        2023, "Efficient Memory Management for LLM Serving with PagedAttention")."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * bytes_per_element


def _require(config: dict[str, Any], key: str, source: str) -> Any:
    if key not in config:
        raise PlanError(f"{source}: config.json has no {key!r}; a plan needs it")
    return config[key]


def shape_from_config(config: dict[str, Any], name: str, source: str) -> ModelShape:
    """A `ModelShape` from a config.json's fields (`source` names the file in errors)."""
    config = config.get("text_config", config)  # multimodal configs nest the language model
    hidden = _require(config, "hidden_size", source)
    heads = _require(config, "num_attention_heads", source)
    return ModelShape(
        name=name,
        vocab_size=_require(config, "vocab_size", source),
        hidden_size=hidden,
        intermediate_size=_require(config, "intermediate_size", source),
        num_layers=_require(config, "num_hidden_layers", source),
        num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or hidden // heads,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        torch_dtype=str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
        max_position_embeddings=config.get("max_position_embeddings", 0),
        num_experts=config.get("num_experts", 0) or 0,
        num_experts_per_tok=config.get("num_experts_per_tok", 0) or 0,
        moe_intermediate_size=config.get("moe_intermediate_size", 0) or 0,
        decoder_sparse_step=config.get("decoder_sparse_step", 1) or 1,
        mlp_only_layers=tuple(config.get("mlp_only_layers") or ()),
    )
