"""The printed plan: topology, per-GPU memory table, vLLM engine, verdict, work estimate."""

from __future__ import annotations

from gspo_trl.plan.planner import Plan
from gspo_trl.plan.setup import Setup
from gspo_trl.plan.vllm_memory import GIB


def _gib(n: float) -> str:
    return f"{n / GIB:8.2f} GiB"


def _params(n: float) -> str:
    return f"{n / 1e9:.2f}B"


def _seconds(s: float | None) -> str:
    if s is None:
        return "n/a"
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def _packing_line(setup: Setup) -> list[str]:
    """With packing: the tokens a row costs the step time, and where the mean completion came from."""
    if not setup.packing:
        return []
    source = "assumed half the cap" if setup.completion_length_assumed else "given"
    return [
        f"  packing   step time counts {setup.forwarded_sequence_length:,.0f} tokens a row "
        f"(mean completion {source}); memory keeps the padded {setup.sequence_length} (its peak)"
    ]


def _topology(plan: Plan) -> list[str]:
    shape, setup = plan.shape, plan.setup
    active = "" if not shape.is_moe else f", {_params(shape.active_params)} active"
    lora = "full fine-tuning"
    if setup.lora:
        lora = f"LoRA r={setup.lora.r} on {', '.join(setup.lora.target_modules)}"
    prompt = f"{setup.max_prompt_length}" + (" (assumed)" if setup.prompt_length_assumed else "")
    generation = "transformers generate"
    if setup.colocated_vllm:
        generation = f"vLLM colocate, TP {setup.vllm_tensor_parallel_size}"
    elif setup.use_vllm:
        generation = "vLLM server on its own node (vllm_tensor_parallel_size is colocate's)"
    return [
        f"gspo-trl plan: {shape.name}",
        f"  model     {_params(shape.total_params)} params{active} "
        f"({_params(shape.non_embedding_params)} non-embedding), weights {setup.weights_dtype}, {lora}",
        f"  topology  {setup.nodes} node(s) x {setup.gpus_per_node} GPU(s) = {setup.world_size}, "
        f"{setup.gpu_memory_gib:g} GiB usable each ({plan.capacity_note}), strategy {setup.strategy}",
        f"  batch     {setup.per_device_train_batch_size} per GPU x ({prompt} prompt + "
        f"{setup.max_completion_length} completion) = {setup.micro_batch_tokens} tokens per micro-batch; "
        f"gradient_checkpointing {str(setup.gradient_checkpointing).lower()}",
        *_packing_line(setup),
        f"  rollout   {generation}; {setup.generation_batch_size} completions per rollout batch "
        f"({setup.num_generations} per prompt)",
    ]


def _memory_table(plan: Plan) -> list[str]:
    lines = ["", "Memory per GPU (estimate)", f"  {'term':38s} {'size':>12s}  when      note"]
    when = {"state": "always", "train": "training", "rollout": "rollout", "step": "opt. step"}
    for term in plan.terms:
        lines.append(f"  {term.name:38s} {_gib(term.bytes)}  {when[term.phase]:9s} {term.note}")
    verdict = plan.verdict
    share = verdict.peak_bytes / verdict.gpu_bytes
    lines.append(
        f"  {'peak (' + verdict.peak_phase + ' phase)':38s} {_gib(verdict.peak_bytes)}  "
        f"{share:.0%} of {verdict.gpu_bytes / GIB:g} GiB"
    )
    return lines


def _vllm(plan: Plan) -> list[str]:
    setup, engine = plan.setup, plan.vllm
    if not setup.use_vllm:
        return []
    per_token = plan.shape.kv_bytes_per_token(setup.weight_bytes)
    lines = ["", "vLLM", f"  KV cache per token        {per_token / 1024:.0f} KiB (whole model)"]
    if engine is None:
        lines.append("  server mode: the engine runs on other GPUs; nothing of it on the training GPUs")
        return lines
    lines += [
        f"  reserved                  {_gib(engine.reserved_bytes)}",
        f"  engine weights            {_gib(engine.weight_bytes)}",
        f"  KV cache                  {_gib(max(0, engine.kv_cache_bytes))} = {engine.kv_tokens} tokens",
        f"  concurrent sequences      {engine.concurrent_sequences} "
        f"(KV fits {engine.sequences_fitting_kv} x {engine.sequence_length} tokens; "
        f"TRL max_num_seqs {engine.max_num_seqs})",
    ]
    return lines


def _verdict(plan: Plan) -> list[str]:
    verdict = plan.verdict
    lines = [
        "",
        f"Verdict: {verdict.status.upper()}",
        f"  dominant term: {verdict.dominant.name} ({verdict.dominant.bytes / GIB:.1f} GiB, "
        f"{verdict.dominant.bytes / verdict.peak_bytes:.0%} of the peak)",
    ]
    if verdict.fix:
        lines.append(f"  first fix to try: {verdict.fix}")
    if verdict.fix_flags:
        lines.append(f"  as overrides: {verdict.fix_flags}")
    return lines


def _work(plan: Plan) -> list[str]:
    work = plan.throughput
    return [
        "",
        "Work per rollout batch (estimate, at maximal lengths)",
        f"  {work.prompts} prompts, {work.completions} completions, {work.tokens:,} tokens, "
        f"{work.optimizer_steps:g} optimizer step(s)",
        f"  training FLOPs {work.training_flops:.3g} ("
        f"{'4 x frozen + 6 x adapter' if plan.setup.lora else '6 x active'} params x tokens + attention"
        f"{', + 1 forward for checkpointing' if plan.setup.gradient_checkpointing else ''})",
        f"  old log-prob forward {work.old_logprob_flops:.3g}, reference forward {work.reference_flops:.3g}",
        f"  FLOPs per optimizer step {work.flops_per_optimizer_step:.3g}",
        f"  floor at {work.peak_tflops:g} TFLOP/s per GPU: {_seconds(work.compute_seconds)} training; "
        f"generation floor at {work.bandwidth_tb_s:g} TB/s: {_seconds(work.generation_seconds)}",
    ]


def format_plan(plan: Plan) -> str:
    """Every section of the report, as one string."""
    sections = _topology(plan) + _memory_table(plan) + _vllm(plan) + _verdict(plan) + _work(plan)
    return "\n".join(sections)
