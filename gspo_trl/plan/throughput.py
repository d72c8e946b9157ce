"""Estimates of the work in one rollout batch: tokens, training FLOPs, and generation-time floors.

FLOPs are gspo_trl.model.sizing.flops (Kaplan et al. 2020, the same count the trainer's `perf/mfu` uses):
2N + 2 x layers x context x d_attn per token forward, 3 forwards per training pass (4 with
gradient checkpointing; LoRA on a frozen base: 4N + 6 x adapters instead of 6N). GRPO adds a
no-grad forward for the old policy's log-probs when TRL computes them (see
`Setup.computes_old_logprobs`) and one for a reference model when beta > 0.

Generation is bounded below by memory bandwidth: each decode step reads the engine's weights once
for all the sequences decoding together, plus every one of their cached K/V entries. Prefill,
sampling, and weight syncing are left out, so real rollouts are slower. Every figure here is an
estimate at maximal prompt and completion lengths, not a measurement. The same decode floor
times a held-out evaluation (`decode_seconds`); gspo_trl.plan.run_time adds the batches up.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gspo_trl.model.sizing.flops import forward_flops_per_token, training_flops_per_token
from gspo_trl.model.sizing.gpu_rates import rates_named
from gspo_trl.plan.memory import lora_adapter_params
from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import Setup
from gspo_trl.plan.vllm_memory import VllmPlan, kv_bytes_per_token_per_gpu

H100_BF16_DENSE_TFLOPS = rates_named("H100").bf16_dense_tflops
H100_SXM_BANDWIDTH_TB_S = rates_named("H100").bandwidth_tb_s


@dataclass(frozen=True)
class Throughput:
    """One rollout batch's work; times are seconds, lower bounds at peak hardware rates."""

    completions: int
    prompts: int
    tokens: int
    optimizer_steps: float
    training_flops: float
    old_logprob_flops: float
    reference_flops: float
    compute_seconds: float
    generation_seconds: float | None
    peak_tflops: float = H100_BF16_DENSE_TFLOPS
    """The per-GPU rate the FLOPs are divided by (bf16 dense)."""
    bandwidth_tb_s: float = H100_SXM_BANDWIDTH_TB_S
    """The per-GPU memory bandwidth the decode floors are divided by."""

    @property
    def total_flops(self) -> float:
        return self.training_flops + self.old_logprob_flops + self.reference_flops

    @property
    def flops_per_optimizer_step(self) -> float:
        return self.total_flops / self.optimizer_steps

    @property
    def floor_seconds_per_optimizer_step(self) -> float:
        """The rollout batch's compute floor plus its generation floor (0 s where not estimated:
        a vLLM server), shared over its optimizer steps: the plan's floor per step."""
        return (self.compute_seconds + (self.generation_seconds or 0.0)) / self.optimizer_steps

    def seconds_for(self, flops: float, world_size: int) -> float:
        """`flops` spread over `world_size` GPUs at the peak rate."""
        return flops / (world_size * self.peak_tflops * 1e12)


def decode_weight_bytes(shape: ModelShape, setup: Setup, concurrent: int) -> float:
    """Weight bytes one decode step reads on one GPU of the engine. A MoE layer reads only the
    experts the batch routes to: at most concurrent x top-k of them."""
    tp = setup.vllm_tensor_parallel_size if setup.use_vllm else 1
    experts = shape.num_moe_layers * shape.num_experts * shape.expert_params
    touched = min(1.0, concurrent * shape.num_experts_per_tok / shape.num_experts) if shape.is_moe else 0.0
    params = shape.total_params - experts + touched * experts
    return params * setup.weight_bytes / tp


def decode_seconds(
    shape: ModelShape,
    setup: Setup,
    sequences: int,
    concurrent: int,
    prompt: int,
    steps: int,
    bandwidth_tb_s: float,
) -> float:
    """Bandwidth floor for `sequences` of `prompt` + `steps` tokens on one engine GPU, decoded
    `concurrent` at a time: per wave, each step reads the weights once and every cached K/V."""
    waves = math.ceil(sequences / concurrent)
    kv_per_token = kv_bytes_per_token_per_gpu(shape, setup)
    weights = steps * decode_weight_bytes(shape, setup, concurrent)
    kv_reads = concurrent * kv_per_token * (prompt * steps + steps * (steps + 1) / 2)
    return waves * (weights + kv_reads) / (bandwidth_tb_s * 1e12)


def generation_seconds(
    shape: ModelShape, setup: Setup, vllm: VllmPlan | None, bandwidth_tb_s: float
) -> float | None:
    """Bandwidth floor for one rollout batch on one engine; None when no sequence fits or vLLM
    runs elsewhere (server mode)."""
    if setup.use_vllm and vllm is None:
        return None
    sequences = setup.per_device_train_batch_size * setup.steps_per_generation
    if vllm is not None:
        sequences *= setup.vllm_tensor_parallel_size
        concurrent = vllm.concurrent_sequences
    else:
        concurrent = sequences  # transformers generate decodes the whole local batch together
    if concurrent < 1:
        return None
    steps, prompt = setup.max_completion_length, setup.max_prompt_length
    return decode_seconds(shape, setup, sequences, concurrent, prompt, steps, bandwidth_tb_s)


def throughput(
    shape: ModelShape,
    setup: Setup,
    vllm: VllmPlan | None,
    peak_tflops: float = H100_BF16_DENSE_TFLOPS,
    bandwidth_tb_s: float = H100_SXM_BANDWIDTH_TB_S,
) -> Throughput:
    """Tokens, FLOPs and time floors of one rollout batch across all GPUs."""
    completions = setup.generation_batch_size
    length = setup.forwarded_sequence_length  # packing: a row's own tokens, not the rectangle's width
    tokens = round(completions * length)
    forward = forward_flops_per_token(shape, round(length)) * tokens
    trained = shape
    if setup.lora:  # a frozen base: no weight gradients but the adapters' (gspo_trl.model.sizing.flops)
        trained = dataclasses.replace(shape, lora_adapter_params=lora_adapter_params(shape, setup.lora, True))
    per_token = training_flops_per_token(trained, round(length), setup.gradient_checkpointing)
    training = setup.num_iterations * per_token * tokens
    old = forward if setup.computes_old_logprobs else 0.0
    reference = forward if setup.beta > 0 else 0.0
    optimizer_steps = float(setup.rollout_batch.optimizer_updates)
    compute = (training + old + reference) / (setup.world_size * peak_tflops * 1e12)
    return Throughput(
        completions=completions,
        prompts=completions // setup.num_generations,
        tokens=tokens,
        optimizer_steps=optimizer_steps,
        training_flops=training,
        old_logprob_flops=old,
        reference_flops=reference,
        compute_seconds=compute,
        generation_seconds=generation_seconds(shape, setup, vllm, bandwidth_tb_s),
        peak_tflops=peak_tflops,
        bandwidth_tb_s=bandwidth_tb_s,
    )
