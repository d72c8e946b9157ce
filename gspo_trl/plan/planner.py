"""Put the pieces together: one `plan(...)` call from a recipe's training keys to a `Plan`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from gspo_trl.config.defaults import LORA_LEARNING_RATE_FACTOR
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.model.sizing.gpu_rates import GPU_RATES, usable_memory_gib
from gspo_trl.plan.activations import activation_term, logits_term
from gspo_trl.plan.generation_memory import generate_kv_term
from gspo_trl.plan.memory import MemoryTerm, model_state_terms
from gspo_trl.plan.model_shape import ModelShape, PlanError, load_model_shape
from gspo_trl.plan.setup import Setup, make_setup
from gspo_trl.plan.throughput import (
    H100_BF16_DENSE_TFLOPS,
    H100_SXM_BANDWIDTH_TB_S,
    Throughput,
    throughput,
)
from gspo_trl.plan.verdict import (
    DOES_NOT_FIT,
    FITS,
    TIGHT,
    Fix,
    Verdict,
    candidate_fixes,
    classify,
    override_flags,
    vllm_starved,
    vllm_utilization_needed,
)
from gspo_trl.plan.vllm_memory import ENGINE_OVERHEAD_BYTES, GIB, VllmPlan, vllm_plan, vllm_terms


@dataclass(frozen=True)
class Plan:
    """Per-GPU memory terms, the colocated vLLM engine, the verdict and the work estimate."""

    shape: ModelShape
    setup: Setup
    terms: list[MemoryTerm]
    vllm: VllmPlan | None
    verdict: Verdict
    throughput: Throughput
    capacity_note: str = ""
    """What `setup.gpu_memory_gib` is: the usable GiB per GPU and where the figure comes from."""


def memory_terms(shape: ModelShape, setup: Setup) -> tuple[list[MemoryTerm], VllmPlan | None]:
    """Every per-GPU term, and the colocated engine's plan when there is one."""
    terms = model_state_terms(shape, setup)
    terms += [activation_term(shape, setup), logits_term(shape, setup)]
    engine = vllm_plan(shape, setup) if setup.colocated_vllm else None
    if engine is not None:
        terms += vllm_terms(engine, setup)
    elif not setup.use_vllm:
        terms.append(generate_kv_term(shape, setup))
    return terms, engine


def judge(shape: ModelShape, setup: Setup) -> tuple[list[MemoryTerm], VllmPlan | None, Verdict]:
    """Terms and verdict of one setup, without suggesting fixes."""
    terms, engine = memory_terms(shape, setup)
    gpu_bytes = int(setup.gpu_memory_gib * GIB)
    verdict = classify(terms, gpu_bytes)
    if engine is not None and vllm_starved(engine.kv_tokens, engine.sequence_length):
        vllm_line = next(t for t in terms if t.name.startswith("vLLM"))
        verdict = Verdict(DOES_NOT_FIT, verdict.peak_bytes, gpu_bytes, "rollout", vllm_line)
    return terms, engine, verdict


def _best(judged: list[tuple[Fix, Verdict]], peak: int) -> tuple[Fix, Verdict] | None:
    """The first fix that fits, else the first tight one, else the first that lowers the peak."""
    for wanted in (FITS, TIGHT):
        for fix, outcome in judged:
            if outcome.status == wanted:
                return fix, outcome
    return next(((f, v) for f, v in judged if v.peak_bytes < peak), None)


def fix_chain(
    shape: ModelShape, setup: Setup, verdict: Verdict, allow_lora: bool, max_steps: int = 4
) -> list[tuple[Fix, Verdict]]:
    """Changes to apply in turn until the setup fits: each round re-plans every candidate for the
    then-dominant term and keeps the first that fits, else the first that lowers the peak."""
    chain: list[tuple[Fix, Verdict]] = []
    for _ in range(max_steps):
        if verdict.status != DOES_NOT_FIT:
            break
        fixes = candidate_fixes(verdict.dominant.name, setup, allow_lora)
        best = _best([(fix, judge(shape, fix.apply(setup))[2]) for fix in fixes], verdict.peak_bytes)
        if best is None:
            break
        chain.append(best)
        setup, verdict = best[0].apply(setup), best[1]
    return chain


def first_fix(
    shape: ModelShape, setup: Setup, verdict: Verdict, engine: VllmPlan | None, learning_rate: float
) -> tuple[str | None, str | None]:
    """What to change first, in words with the re-planned outcome, and as recipe overrides."""
    if verdict.status == FITS:
        return None, None
    if engine is not None and vllm_starved(engine.kv_tokens, engine.sequence_length):
        needed = vllm_utilization_needed(
            engine.weight_bytes,
            ENGINE_OVERHEAD_BYTES,
            engine.kv_bytes_per_token,
            engine.sequence_length,
            verdict.gpu_bytes,
        )
        needed = math.ceil(needed * 100) / 100
        return (
            f"vllm_gpu_memory_utilization >= {needed:.2f}: the engine's KV cache cannot hold one "
            f"{engine.sequence_length}-token rollout (or vllm_mode: server)",
            f"--vllm_gpu_memory_utilization {needed:.2f}",
        )
    chain: list[tuple[Fix, Verdict]] = []
    for allow_lora in (False, True):
        if verdict.status == TIGHT:
            fixes = candidate_fixes(verdict.dominant.name, setup, allow_lora)
            best = _best([(f, judge(shape, f.apply(setup))[2]) for f in fixes], 0)
            chain = [best] if best and best[1].status == FITS else []
        else:
            chain = fix_chain(shape, setup, verdict, allow_lora)
        if chain and chain[-1][1].status != DOES_NOT_FIT:
            break
    if not chain and verdict.status == TIGHT:
        return "none of the plan's fixes gets below 90%: watch for fragmentation OOMs", None
    if not chain:
        return "more GPUs or a smaller model: no change the plan knows helps", None
    steps = " then ".join(fix.description for fix, _ in chain)
    outcome = chain[-1][1]
    text = f"{steps} -> {outcome.status}, peak {outcome.peak_bytes / GIB:.1f} GiB"
    flags = override_flags([fix for fix, _ in chain])
    if any("lora" in fix.overrides for fix, _ in chain):
        lora_rate = learning_rate * LORA_LEARNING_RATE_FACTOR
        text += (
            f"; LoRA usually wants ~{LORA_LEARNING_RATE_FACTOR}x full fine-tuning's learning_rate "
            f"({learning_rate:g} -> {lora_rate:g}; recipes/qwen3-4b: 1e-6 full, 1e-5 LoRA), and a wider "
            "clip range (recipes/qwen3-4b/math-lora.yaml's header)"
        )
        flags += f" --learning_rate {lora_rate:g}"
    return text, flags


def plan(
    training: dict[str, Any],
    model_name_or_path: str | ModelShape,
    strategy: str = "ddp",
    nodes: int = 1,
    gpus_per_node: int = 8,
    gpu_memory_gb: float = 80.0,
    lora: dict[str, Any] | None = None,
    dtype: str | None = None,
    allow_pure_bf16: bool = False,
    peak_tflops: float = H100_BF16_DENSE_TFLOPS,
    bandwidth_tb_s: float = H100_SXM_BANDWIDTH_TB_S,
    gpu_name: str | None = None,
    max_staleness: int = 0,
) -> Plan:
    """Plan a GSPO/GRPO run: per-GPU memory, a verdict with the first fix, and a work estimate.

    `training` holds TRL GRPOConfig keys (per_device_train_batch_size, max_completion_length,
    gradient_checkpointing, use_vllm, vllm_gpu_memory_utilization, ...; others are ignored), plus
    optional `max_prompt_length`. `model_name_or_path` is a local model directory, a config.json,
    a shipped hub id (`Qwen/Qwen3-8B`), or a `ModelShape` already read. `strategy` is ddp, zero2,
    zero3 or fsdp2; `lora` holds peft.LoraConfig fields; `dtype` the recipe's `model.dtype` (None:
    the checkpoint's own; bfloat16 is trained as float32 without DeepSpeed or LoRA unless
    `allow_pure_bf16`, gspo_trl.model.loading.precision). `max_staleness` is `engine.max_staleness`
    (> 0: sleep mode is never a fix).
    `gpu_memory_gb` is the card's nominal size ("80" GB); the plan fills only what CUDA reports
    of it (gspo_trl.model.sizing.gpu_rates.usable_memory_gib: measured for `gpu_name` H100/H200, else an
    assumed share). `peak_tflops` and `bandwidth_tb_s` (H100 SXM by default) only scale the time
    estimates.
    """
    if isinstance(model_name_or_path, ModelShape):
        shape = model_name_or_path
    else:
        shape = load_model_shape(model_name_or_path)
    if not gpu_memory_gb > 0:
        raise PlanError(f"gpu_memory_gb = {gpu_memory_gb!r}: expected a positive number")
    rates = next((row for row in GPU_RATES if row.name == gpu_name), None)
    usable_gib, capacity_note = usable_memory_gib(gpu_memory_gb, rates)
    setup = make_setup(
        training,
        shape,
        strategy,
        nodes,
        gpus_per_node,
        usable_gib,
        lora,
        dtype,
        allow_pure_bf16,
        max_staleness,
    )
    terms, engine, verdict = judge(shape, setup)
    learning_rate = float(training.get("learning_rate", grpo_default("learning_rate")))
    fix, flags = first_fix(shape, setup, verdict, engine, learning_rate)
    verdict = dataclasses.replace(verdict, fix=fix, fix_flags=flags)
    work = throughput(shape, setup, engine, peak_tflops, bandwidth_tb_s)
    return Plan(shape, setup, terms, engine, verdict, work, capacity_note)
