"""Training FLOPs of a decoder-only transformer, and the peak FLOP rate of the device they run on.

One count, used by `gspo-trl plan` (gspo_trl.plan.throughput, at maximal lengths) and by the
trainer's `perf/mfu` (gspo_trl.training.reporting.phases, on the batches it really trains).
Kaplan et al. 2020's count: a forward is 2N FLOPs per token plus causal attention, a training
pass 3 forwards, plus with gradient checkpointing the part of the forward the backward reruns
(`recompute_flops_per_token`). N is the active matmul parameters (the LM head included, the
embedding not; MoE: routed experts only). LoRA (`ModelShape.lora_adapter_params` A > 0):
4N + 6A + 3 x attention per token, since the frozen base runs no weight-gradient matmuls.

Peak rates: the published dense bf16 figures of gspo_trl.model.sizing.gpu_rates; a CPU's peak is
measured, the best square float32 matmul rate ever seen at the thread count
(gspo_trl.model.sizing.cpu_peak). Docs: docs/plan.md ("Work, hours and cost") and
docs/performance.md ("MFU").
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch

from gspo_trl.model.sizing.cpu_peak import machine_cpu_peak
from gspo_trl.model.sizing.gpu_rates import rates_of_device
from gspo_trl.model.sizing.shape import ModelShape

CPU_BENCH_SIZE = 512
"""Side of the square float32 matmul that measures a CPU's peak (about 0.27 GFLOP a product)."""


def forward_flops_per_token(shape: ModelShape, sequence_length: int) -> float:
    """Kaplan's C_forward per token: 2N + 2 x layers x context x d_attn."""
    attention = 2 * shape.num_layers * sequence_length * shape.q_dim
    return 2 * shape.active_matmul_params + attention


def recompute_flops_per_token(shape: ModelShape, sequence_length: int) -> float:
    """What gradient checkpointing reruns in the backward, per token: the decoder layers' forward
    less each layer's down projection. transformers checkpoints each `GradientCheckpointingLayer`
    (the decoder layers); the embedding, final norm and LM head run once. transformers'
    `gradient_checkpointing_enable` defaults to `use_reentrant=False` (TRL sets it too before
    transformers 5.0), and torch's non-reentrant checkpoint "stops recomputation as soon as it has
    computed all needed Tensors" (`early_stop`, default True): the backward needs the down
    projection's input, never its output. FlopCounterMode agrees on the tiny model
    (tests/training/reporting/test_phases.py); `use_reentrant=True` also reruns the down projection."""
    down = sum(
        shape.num_experts_per_tok * shape.moe_intermediate_size
        if shape.is_moe_layer(i)
        else shape.intermediate_size
        for i in range(shape.num_layers)
    )
    lm_head = shape.vocab_size * shape.hidden_size
    return forward_flops_per_token(shape, sequence_length) - 2 * (lm_head + down * shape.hidden_size)


@functools.lru_cache(maxsize=1024)
def training_flops_per_token(shape: ModelShape, sequence_length: int, gradient_checkpointing: bool) -> float:
    """One training pass per token: forward + backward (3 forwards), plus the recompute; with
    LoRA adapters on a frozen base, less the base's weight gradients plus the adapters' work.
    Cached: the trainer asks it for every minibatch (perf/mfu), with few distinct lengths."""
    recompute = recompute_flops_per_token(shape, sequence_length) if gradient_checkpointing else 0.0
    full = 3 * forward_flops_per_token(shape, sequence_length) + recompute
    if not shape.lora_adapter_params:
        return full
    return full - 2 * shape.active_matmul_params + 6 * shape.lora_adapter_params


def update_flops(shape: ModelShape, rows: int, sequence_length: int, gradient_checkpointing: bool) -> float:
    """FLOPs of one forward+backward over `rows` sequences padded to `sequence_length` tokens."""
    return training_flops_per_token(shape, sequence_length, gradient_checkpointing) * rows * sequence_length


def datasheet_peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a GPU named like `torch.cuda.get_device_name()`
    (gspo_trl.model.sizing.gpu_rates);
    None if the table has no such GPU."""
    rates = rates_of_device(device_name)
    return rates.bf16_dense_tflops if rates else None


@functools.cache
def measured_cpu_peak_tflops(threads: int, seconds: float = 0.2) -> float:
    """Best float32 matmul rate this process reaches on `threads` threads (measured once per
    process and thread count; about `seconds` long)."""
    n = CPU_BENCH_SIZE
    numbers = torch.Generator().manual_seed(0)  # not the global RNG: a run seeded before this samples
    a, b = torch.randn(n, n, generator=numbers), torch.randn(n, n, generator=numbers)  # as if unmeasured
    torch.mm(a, b)  # warm-up: allocation, thread pool
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * n**3 / (time.perf_counter() - start))
    return best / 1e12


def peak_tflops(device: Any) -> tuple[float | None, str]:
    """(peak TFLOPS of `device`, where the figure comes from); (None, why) when unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        tflops = datasheet_peak_tflops(name)
        return tflops, f"{name}, datasheet bf16 dense" if tflops else f"{name}: not in the datasheet table"
    if device.type == "cpu":  # kept per machine: MFU divides by one figure there (cpu_peak)
        threads = torch.get_num_threads()
        tflops, source = machine_cpu_peak(threads, measured_cpu_peak_tflops)
        return tflops, f"CPU: fp32 matmul, {threads} thread(s), {source}"
    return None, f"{device.type}: no peak figure"
