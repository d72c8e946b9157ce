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
        launch = result.launch
        layout = ""
        if launch is not None and launch.server_tensor_parallel_size:
            tp, dp = launch.server_tensor_parallel_size, launch.server_data_parallel_size or 1
            layout = f" (tensor parallel {tp} x data parallel {dp}, launch:)"
        lines.append(
            f"  vLLM      server mode: node {topology.vllm_node} runs `trl vllm-serve`{layout} and trains "
            f"nothing; {topology.training_nodes} training node(s)"
        )
    lines.append(f"  processes {topology.world_size} training processes (world size)")
    problem = result.batch_problem
    check = "ok" if problem is None else f"PROBLEM: {problem}"
    lines.append(
        f"  batches   generation batch {batch.generation_batch_size} = "
        f"{batch.prompts if problem is None else '?'} groups of {batch.num_generations}: {check}"
    )
    gspo = "GSPO needs >= 2, else every ratio is 1 (it is GRPO)" if batch.on_policy else "ok"
    updates = batch.optimizer_updates
    count = str(updates) if updates.denominator == 1 else f"{float(updates):g}"
    lines.append(f"  updates   {count} optimizer update(s) per rollout batch: {gspo}")
    return lines


def _heldout(result: RecipePlan) -> list[str]:
    load = result.heldout
    if load is None:
        return []
    rows = f"{load.rows}" + ("" if load.rows_known else " (max_rows; the split may hold fewer)")
    every = f", {load.evaluations} evaluations over max_steps" if load.evaluations else ""
    gpu_bytes = result.plan.verdict.gpu_bytes
    share = load.peak_bytes / gpu_bytes
    warning = "" if share <= 1 else "  WARNING: more than the GPU; lower heldout.max_batch_tokens"
    samples = f"{load.score_samples} score"
    if load.sampled_samples:
        samples += f" + {load.sampled_samples} pass@k"
    lines = [
        "",
        f"Held-out evaluation (estimate; {load.engine}, rows split over {load.num_shards} shard(s))",
        f"  {rows} rows, {load.rows_per_shard} per shard x ({samples}) sample(s) x "
        f"{load.max_completion_length} tokens = {load.tokens:,} generated tokens per evaluation on the "
        f"busiest rank{every}",
    ]
    if load.batch_rows is None:
        lines.append(
            f"  inside the colocated engine's reservation: with the model state "
            f"{load.peak_bytes / GIB:.1f} GiB = {share:.0%} of the GPU{warning}"
        )
        return lines
    gathered = ""
    if load.gathered_weight_bytes:
        gathered = f" + {load.gathered_weight_bytes / GIB:.1f} GiB of gathered ZeRO-3 weights"
    lines.append(
        f"  HF generate, {load.batch_rows} rows per batch (heldout.max_batch_tokens "
        f"{load.max_batch_tokens}): KV cache {load.kv_peak_bytes / GIB:.1f} GiB{gathered}; with the "
        f"model state {load.peak_bytes / GIB:.1f} GiB = {share:.0%} of the GPU{warning}"
    )
    return lines


def _cost(result: RecipePlan) -> list[str]:
    work = result.plan.throughput
    generation = work.generation_seconds
    floor = (work.compute_seconds + (generation or 0.0)) / work.optimizer_steps
    where = "" if generation is not None else " (generation on the vLLM server not estimated)"
    lines = [f"  floor per optimizer step: {floor:.1f} s{where}"]
    launch = result.launch
    seconds = launch.seconds_per_step if launch is not None else []
    if not seconds:
        return lines
    low, high = seconds[0], seconds[-1]
    basis = "measured" if launch.cost_measured else "estimate"
    steps = int(result.recipe.training.get("max_steps") or -1)
    total = f"; x {steps} max_steps = {_duration(low * steps, high * steps)}" if steps > 0 else ""
    lines.append(f"  recipe launch.seconds_per_step: {_duration(low, high)} per step ({basis}){total}")
    if not launch.gpus:
        lines.append("  (the recipe runs on CPU; the floor above is a GPU's)")
    elif generation is None:
        lines.append("  (the recipe's figure includes generation, not timed here in server mode)")
    elif floor > 0:
        ratio = (
            f"{low / floor:.0f}x" if high - low < 0.05 * high else f"{low / floor:.0f}-{high / floor:.0f}x"
        )
        lines.append(
            f"  the recipe's time per step is {ratio} the floor (RL steps typically run 3-20x a "
            "peak-rate floor: prefill, sampling, weight syncs, rewards, stragglers)"
        )
    return lines


DURATION_UNITS = ((86400 * 2, 86400, "days"), (3600, 3600, "h"), (60, 60, "min"), (0, 1, "s"))
"""(from this many seconds, seconds per unit, unit): the unit a duration is printed in."""


def _duration(low: float, high: float) -> str:
    """`240, 300` -> `4-5 min`; one unit, chosen by the larger figure."""
    _, scale, unit = next(entry for entry in DURATION_UNITS if high >= entry[0])
    low_text, high_text = f"{low / scale:.2g}", f"{high / scale:.2g}"
    return f"{low_text} {unit}" if low_text == high_text else f"{low_text}-{high_text} {unit}"


def _disk(result: RecipePlan) -> list[str]:
    plan, recipe = result.plan, result.recipe
    return format_disk(plan_disk(plan.shape, plan.setup, recipe.training, recipe.model.allow_pure_bf16))


def format_recipe_plan(result: RecipePlan) -> str:
    """Every section of the recipe plan, as one string."""
    plan = result.plan
    sections = [*_launch(result), "", *_topology(plan)[1:], *_memory_table(plan), *_vllm(plan)]
    sections += _heldout(result) + _verdict(plan) + _work(plan) + _cost(result) + _disk(result)
    return "\n".join(sections)
