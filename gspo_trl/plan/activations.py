"""Per-GPU bytes of one training micro-batch: saved activations and the fused LM head's buffers.

Activations follow Korthikanti et al. 2022 (§4.1), redone for the Qwen3 block as transformers 5
runs it: every tensor a layer saves for its backward, per token (RMSNorm's fp32 copies, each
linear's input or its bf16 autocast cast, SDPA's q and repeated K/V with the additive mask, the
SwiGLU intermediates), or only each layer's input plus one recomputed layer with gradient
checkpointing; on top, one layer's backward buffers and the 4-D boolean mask. docs/plan.md's
table of terms says which line of transformers and torch each one comes from.

Logits: TRL 1.16 never materializes (tokens x vocab) logits; its fused LM head
(`add_fused_lm_head`, trl/kernels/chunked_logprob.py) works in 4096 x 32768 tiles, so those
tiles and their fp32 gradient buffers are counted (the naive fp32 figure is shown beside them).
"""

from __future__ import annotations

from gspo_trl.plan.memory import MemoryTerm
from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import Setup

TRL_TOKEN_TILE = 4096  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE
TRL_VOCAB_TILE = 32768  # trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE
TRL_FP32_STATS_PER_TOKEN = 7  # running max, sum_exp and five more fp32 accumulators per token


FP32 = 4


def activation_bytes(setup: Setup) -> int:
    """Bytes per matmul-output element: bf16 under mixed precision, else the weights' dtype."""
    return setup.compute_bytes


def _linear_inputs(width: int, consumers: int, setup: Setup) -> int:
    """Bytes the linears reading one tensor of `width` (in the residual dtype) save per token:
    one shared input, or each consumer's own cast when autocast changes the dtype."""
    residual, compute = setup.forward_weight_bytes, setup.compute_bytes
    return width * (consumers * compute if residual != compute else residual)


def _rms_norm(width: int, input_bytes: int) -> int:
    """RMSNorm's saved tensors per token: the fp32 copy of its input (the input itself when
    already fp32) and the normalized tensor in the input's dtype."""
    return width * (FP32 + input_bytes)


def layer_activation_bytes_per_token(shape: ModelShape, index: int, setup: Setup) -> int:
    """Bytes decoder layer `index` saves for backward, per token, without recomputation."""
    h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
    residual, c = setup.forward_weight_bytes, setup.compute_bytes
    norms = 2 * _rms_norm(h, residual)
    attention = _linear_inputs(h, 3, setup)  # q/k/v projections' input
    attention += _rms_norm(q, c) + _rms_norm(kv, c)  # q_norm, k_norm on the projections' outputs
    # SDPA with a mask: transformers repeats K and V to every query head (repeat_kv, no GQA
    # kernel), so q, k, v and the output (o_proj's input) are q-wide; torch converts the boolean
    # mask to an additive one in the query's dtype per call and saves it (s per token).
    attention += 4 * q * c + setup.sequence_length * c
    attention += shape.num_heads * FP32  # SDPA's log-sum-exp
    if shape.is_moe_layer(index):
        k, width = shape.num_experts_per_tok, shape.moe_intermediate_size
        mlp = _linear_inputs(h, 1, setup)  # router input
        mlp += k * (h + 4 * width + h) * c  # each routed copy: dispatched input, SwiGLU, output
        mlp += 2 * shape.num_experts * FP32  # router logits and probabilities
    else:
        mlp = _linear_inputs(h, 2, setup) + 4 * shape.intermediate_size * c  # gate, silu, up, product
    return norms + attention + mlp


def layer_backward_bytes_per_token(shape: ModelShape, index: int, setup: Setup) -> int:
    """Gradient buffers one layer's backward adds, per token, net of the saved tensors autograd
    frees as each node runs: the gradients of its output and input (residual dtype) and one
    intermediate-width gradient in flight through SwiGLU (each node's grads replace its inputs).

    A MoE layer runs transformers' default `grouped_mm` experts (`applicable_experts = "grouped_mm"
    if requested_experts is None`, transformers/modeling_utils.py:1883), which gather each token's
    k routed copies into one (tokens x k, hidden) input (`selected_hidden_states_g =
    hidden_states[perm // num_top_k]`, transformers/integrations/moe.py:394) and project it to the fused
    gate/up width (`(S, 2 * intermediate_dim)`, :442). So when the up projection's backward runs it
    holds that 2 x width gradient of every copy and writes the dispatched input's gradient, k x
    hidden per token, before the gather's backward scatters it back to the tokens."""
    h, c = shape.hidden_size, setup.compute_bytes
    residual = 2 * h * setup.forward_weight_bytes
    if not shape.is_moe_layer(index):
        return residual + shape.intermediate_size * c
    k = shape.num_experts_per_tok
    return residual + k * (2 * shape.moe_intermediate_size + h) * c


SHARDED_GRADIENTS = ("zero2", "zero3", "fsdp2")
"""Strategies whose gradients term is a shard: a layer's full gradient exists only in its backward."""


def expert_weight_gradient_bytes(shape: ModelShape, setup: Setup) -> int:
    """One MoE layer's whole expert-weight gradient, which `grouped_mm` writes as one tensor per
    fused weight (`gate_up_proj` and `down_proj` are (experts, ., .) Parameters,
    transformers/models/qwen3_moe/modeling_qwen3_moe.py:218-219) in the gathered weights' dtype,
    before ZeRO or FSDP reduce-scatters it to a shard: every expert's, not the k a token uses.
    Counted where gradients are sharded (the gradients term already holds DDP's full ones), and
    not for LoRA, whose experts are frozen."""
    if not shape.is_moe or setup.lora is not None or setup.strategy not in SHARDED_GRADIENTS:
        return 0
    return shape.num_experts * shape.expert_params * setup.forward_weight_bytes


def attention_mask_bytes(setup: Setup) -> int:
    """The 4-D boolean mask transformers builds for padded SDPA batches: batch x 1 x s x s."""
    return setup.per_device_train_batch_size * setup.sequence_length**2


def autocast_weight_copy_bytes(shape: ModelShape, setup: Setup) -> int:
    """bf16 copies autocast makes of fp32 weights and keeps until the backward: every layer's
    linears without checkpointing, one recomputed layer's with it; plus the LM head's."""
    if setup.forward_weight_bytes == setup.compute_bytes:
        return 0
    layers = [shape.layer_params(i) for i in range(shape.num_layers)]
    kept = max(layers) if setup.gradient_checkpointing else sum(layers)
    return (kept + shape.lm_head_params) * setup.compute_bytes


def activation_term(shape: ModelShape, setup: Setup) -> MemoryTerm:
    """Saved activations of one micro-batch (per_device_train_batch_size x prompt+completion
    tokens), the backward's gradient buffers of one layer, the 4-D mask and autocast copies."""
    tokens = setup.micro_batch_tokens
    residual = setup.forward_weight_bytes
    layers = range(shape.num_layers)
    per_layer = [layer_activation_bytes_per_token(shape, i, setup) for i in layers]
    backward = max(layer_backward_bytes_per_token(shape, i, setup) for i in layers)
    head_inputs = _rms_norm(shape.hidden_size, residual)  # the final norm
    if setup.gradient_checkpointing:
        per_token = shape.num_layers * shape.hidden_size * residual + max(per_layer) + head_inputs
        note = f"{tokens} tokens, checkpointed: layer inputs + 1 layer recomputed"
    else:
        per_token = sum(per_layer) + head_inputs
        note = f"{tokens} tokens, every layer's saved tensors"
    experts = expert_weight_gradient_bytes(shape, setup)
    extra = attention_mask_bytes(setup) + autocast_weight_copy_bytes(shape, setup) + experts
    note += ", 1 layer's backward, 4-D mask"
    if experts:
        note += ", 1 layer's unsharded expert-weight gradient"
    if autocast_weight_copy_bytes(shape, setup):
        note += ", bf16 weight copies"
    return MemoryTerm("activations", tokens * (per_token + backward) + extra, "train", note)


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
