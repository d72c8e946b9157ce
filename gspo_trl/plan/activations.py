"""Per-GPU bytes of one training micro-batch: saved activations and the fused LM head's buffers.

Activations follow the accounting of Korthikanti et al. 2022 ("Reducing Activation Recomputation
in Large Transformer Models", §4.1): every tensor a layer saves for its backward, per token. Their
GPT block stores sbh(34 + 5as/h) bytes; here the same count is redone for the Qwen3 block: RMSNorm
instead of LayerNorm, no dropout masks, grouped-query attention with q/k norms, a SwiGLU MLP
(gate, silu, up and their product saved), flash/SDPA attention (the s x s scores are never stored,
so the 5as/h term is gone; only the fp32 log-sum-exp per head remains), and top-k routed experts
on MoE layers. With gradient checkpointing (HF checkpoints every decoder layer) only each layer's
input survives, plus one layer's activations while it is recomputed (their "full recomputation").

Logits: TRL 1.16 never materializes the (tokens x vocab) logits. GRPOTrainer patches the model
with `add_fused_lm_head` (trl/trainer/utils.py), whose `ChunkedLogProbFunction`
(trl/kernels/chunked_logprob.py) projects 4096-token x 32768-vocab tiles and folds them into
online log-sum-exp statistics; its backward accumulates fp32 gradients of the hidden states and
of the LM-head weight. Those buffers, not tokens x vocab x 4, are what the plan counts; the naive
fp32 figure is reported alongside for comparison.
"""

from __future__ import annotations

from gspo_trl.plan.memory import MemoryTerm
from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import Setup

TRL_TOKEN_TILE = 4096  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE
TRL_VOCAB_TILE = 32768  # trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE
TRL_FP32_STATS_PER_TOKEN = 7  # running max, sum_exp and five more fp32 accumulators per token


def activation_bytes(setup: Setup) -> int:
    """Bytes per activation element: bf16 under mixed precision, else the weights' dtype."""
    return 2 if setup.bf16 else setup.weight_bytes


def layer_activation_bytes_per_token(shape: ModelShape, index: int, element_bytes: int) -> int:
    """Bytes decoder layer `index` saves for backward, per token, without recomputation."""
    h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
    # attention: norm input, qkv input, q/k/v, normed+rotated q/k, attention output (o_proj input)
    attention = h + h + (q + 2 * kv) + (q + kv) + q
    # MLP: norm input and output, then per SwiGLU: gate out, silu out, up out, product
    if shape.is_moe_layer(index):
        k, width = shape.num_experts_per_tok, shape.moe_intermediate_size
        mlp = 2 * h + k * (h + 4 * width + h)  # each routed copy: dispatched input, SwiGLU, output
        fp32_extra = 2 * shape.num_experts * 4  # router logits and probabilities
    else:
        mlp = 2 * h + 4 * shape.intermediate_size
        fp32_extra = 0
    log_sum_exp = shape.num_heads * 4
    return (attention + mlp) * element_bytes + fp32_extra + log_sum_exp


def activation_term(shape: ModelShape, setup: Setup) -> MemoryTerm:
    """Saved activations of one micro-batch (per_device_train_batch_size x prompt+completion tokens)."""
    tokens = setup.micro_batch_tokens
    element = activation_bytes(setup)
    per_layer = [layer_activation_bytes_per_token(shape, i, element) for i in range(shape.num_layers)]
    head_inputs = 2 * shape.hidden_size * element  # final norm input and output
    if setup.gradient_checkpointing:
        per_token = shape.num_layers * shape.hidden_size * element + max(per_layer) + head_inputs
        note = f"{tokens} tokens, checkpointed: layer inputs + 1 layer recomputed"
    else:
        per_token = sum(per_layer) + head_inputs
        note = f"{tokens} tokens, every layer's saved tensors"
    return MemoryTerm("activations", tokens * per_token, "train", note)


def naive_logits_bytes(shape: ModelShape, setup: Setup) -> int:
    """What an unfused fp32 log-softmax over the completion tokens would hold: tokens x vocab x 4."""
    return setup.per_device_train_batch_size * setup.max_completion_length * shape.vocab_size * 4


def logits_term(shape: ModelShape, setup: Setup) -> MemoryTerm:
    """TRL's fused LM head over the completion tokens of one micro-batch (see module docstring)."""
    scored = setup.per_device_train_batch_size * setup.max_completion_length
    compute = 4 if setup.cast_lm_head_to_fp32 else activation_bytes(setup)
    tile = min(scored, TRL_TOKEN_TILE) * min(shape.vocab_size, TRL_VOCAB_TILE) * compute
    stats = scored * TRL_FP32_STATS_PER_TOKEN * 4
    hidden = scored * shape.hidden_size * (4 + activation_bytes(setup))  # fp32 grad + gathered input
    head_trainable = setup.lora is None
    weight_grad = shape.vocab_size * shape.hidden_size * 4 if head_trainable else 0
    naive_gib = naive_logits_bytes(shape, setup) / 2**30
    note = f"fused, never tokens x vocab (unfused fp32: {naive_gib:.1f} GiB)"
    return MemoryTerm("logits (TRL fused LM head)", tile + stats + hidden + weight_grad, "train", note)
