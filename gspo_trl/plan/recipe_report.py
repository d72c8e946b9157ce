"""The printed `gspo-trl plan RECIPE`: topology and batches, memory, held-out load, verdict, cost."""

from __future__ import annotations

from gspo_trl.plan.disk import format_disk, plan_disk
from gspo_trl.plan.recipe_plan import RecipePlan
from gspo_trl.plan.report import _memory_table, _topology, _verdict, _vllm, _work
from gspo_trl.plan.vllm_memory import GIB


def _launch(result: RecipePlan) -> list[str]:
    topology, batch, sources = result.topology, result.batch, result.topology.sources
    lines = [
        f"gspo-trl plan {result.recipe.source}",
        f"  hardware  {topology.nodes} node(s) x {topology.gpus_per_node} GPU(s), "
        f"{topology.gpu_memory_gb:g} GB each (nodes: {sources['nodes']}, GPUs: {sources['gpus']}, "
        f"memory: {sources['memory']})",
        f"  strategy  {topology.strategy} ({sources['strategy']})",
    ]
    if topology.server_mode:
        lines.append(
            f"  vLLM      server mode: node {topology.vllm_node} runs `trl vllm-serve` and trains nothing; "
            f"{topology.training_nodes} training node(s)"
        )
    lines.append(f"  processes {topology.world_size} training processes (world size)")
    check = "ok" if batch.problem is None else f"PROBLEM: {batch.problem}"
    lines.append(
        f"  batches   generation batch {batch.generation_batch} = "
        f"{batch.generation_batch // batch.num_generations if batch.problem is None else '?'} groups of "
        f"{batch.num_generations}: {check}"
    )
    gspo = "ok" if batch.updates >= 2 else "GSPO needs >= 2, else every ratio is 1 (it is GRPO)"
    lines.append(f"  updates   {batch.updates} optimizer update(s) per rollout batch: {gspo}")
    return lines


def _heldout(result: RecipePlan) -> list[str]:
    load = result.heldout
    if load is None:
        return []
    rows = f"{load.rows}" + ("" if load.rows_known else " (max_rows; the split may hold fewer)")
    every = f", {load.evaluations} evaluations over max_steps" if load.evaluations else ""
    gpu_bytes = result.plan.verdict.gpu_bytes
    share = load.peak_bytes / gpu_bytes
    warning = "" if share <= 1 else "  WARNING: more than the GPU; lower heldout.max_rows or max length"
    return [
        "",
        "Held-out evaluation (estimate; HF generate on each rank today, not sharded)",
        f"  {rows} rows x {load.samples} sample(s) x {load.max_completion_length} tokens = "
        f"{load.tokens:,} generated tokens per evaluation per rank{every}",
        f"  KV cache of one 64-prompt generate batch {load.kv_peak_bytes / GIB:.1f} GiB; "
        f"with the model state {load.peak_bytes / GIB:.1f} GiB = {share:.0%} of the GPU{warning}",
    ]


def _cost(result: RecipePlan) -> list[str]:
    work = result.plan.throughput
    generation = work.generation_seconds
    floor = (work.compute_seconds + (generation or 0.0)) / work.optimizer_steps
    where = "" if generation is not None else " (generation on the vLLM server not estimated)"
    lines = [f"  floor per optimizer step: {floor:.1f} s{where}"]
    header = result.header_minutes_per_step
    if result.header_cost:
        lines.append(f"  recipe header Cost: {result.header_cost.split('. ')[0].rstrip('.')}.")
    if header is not None and generation is None:
        lines.append("  (the header's figure includes generation, not timed here in server mode)")
    elif header is not None and floor > 0:
        low, high = (minutes * 60 / floor for minutes in header)
        ratio = f"{low:.0f}x" if abs(high - low) < 0.5 else f"{low:.0f}-{high:.0f}x"
        lines.append(
            f"  header's min/step is {ratio} the floor (estimate; RL steps typically run 3-20x a "
            "peak-rate floor: prefill, sampling, weight syncs, rewards, stragglers)"
        )
    return lines


def _disk(result: RecipePlan) -> list[str]:
    plan, recipe = result.plan, result.recipe
    return format_disk(plan_disk(plan.shape, plan.setup, recipe.training, recipe.model.allow_pure_bf16))


def format_recipe_plan(result: RecipePlan) -> str:
    """Every section of the recipe plan, as one string."""
    plan = result.plan
    sections = [*_launch(result), "", *_topology(plan)[1:], *_memory_table(plan), *_vllm(plan)]
    sections += _heldout(result) + _verdict(plan) + _work(plan) + _cost(result) + _disk(result)
    return "\n".join(sections)
