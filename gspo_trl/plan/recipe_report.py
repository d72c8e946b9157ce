"""The printed `gspo-trl plan RECIPE`: topology and batches, memory, held-out load, verdict, cost."""

from __future__ import annotations

from gspo_trl.plan.disk import format_disk, plan_disk
from gspo_trl.plan.overlap import format_step_time
from gspo_trl.plan.recipe_plan import RecipePlan
from gspo_trl.plan.report import _memory_table, _topology, _verdict, _vllm, _work
from gspo_trl.plan.run_time import Price, RunTime
from gspo_trl.plan.topology import Topology
from gspo_trl.plan.verdict import DOES_NOT_FIT
from gspo_trl.plan.vllm_memory import GIB


def _launch(result: RecipePlan) -> list[str]:
    topology, batch, sources = result.topology, result.batch, result.topology.sources
    lines = [
        f"gspo-trl plan {result.recipe.source}",
        f"  hardware  {topology.nodes} node(s) x {topology.gpus_per_node} GPU(s), "
        f"{topology.gpu_memory_gb:g} GB each (nodes: {sources['nodes']}, GPUs: {sources['gpus']}, "
        f"memory: {sources['memory']})",
        f"  GPU type  {topology.gpu.name} ({sources['gpu_type']}): the rates and price the run is timed "
        "and costed at",
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


def _money(usd: float) -> str:
    return f"${usd:,.0f}" if usd >= 10 else f"${usd:.2f}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h"


def _rates(topology: Topology) -> str:
    gpu = topology.gpu
    return (
        f"GPU type: {topology.sources['gpu_type']}; {gpu.bf16_dense_tflops:g} TFLOP/s bf16, "
        f"{gpu.bandwidth_tb_s:g} TB/s: {gpu.rates_source}"
    )


def _cost_line(run: RunTime, price: Price, hours: float | None = None, label: str = "cost") -> str:
    hours = run.hours if hours is None else hours
    usd = run.gpus * hours * price.usd_per_gpu_hour
    return (
        f"  {label} ~{_money(usd)} ({run.gpus} GPU(s) x {hours:.3g} h x ${price.usd_per_gpu_hour:.2f}/GPU-h, "
        f"price: {price.source})"
    )


def _parts(result: RecipePlan) -> list[str]:
    run = result.run
    lines = [
        f"  on {result.topology.hardware} ({_rates(result.topology)})",
        f"  max_steps {run.max_steps} = {run.rollout_batches} rollout batch(es) of "
        f"{float(run.updates_per_rollout_batch):g} update(s), {result.batch.generation_batch_size} "
        "completions each",
    ]
    for part in run.parts:
        if part.seconds_each is None:
            each = "not estimated (generation on the vLLM server node)"
        else:
            each = f"{part.count} x {part.seconds_each:.3g} s = {_hours(part.seconds)}"
        lines.append(f"  {part.name:26s} {each}")
    total = "total" if run.complete else "total (without the parts not estimated)"
    lines.append(f"  {total:26s} {_hours(run.seconds)}")
    lines.append(_cost_line(run, result.price, label="cost" if run.complete else "cost of the timed parts"))
    if result.plan.verdict.status == DOES_NOT_FIT:
        lines.append(
            "  (timed as configured, though it does not fit: its first fix changes batches and time)"
        )
    return lines


def _stated(result: RecipePlan, here: RecipePlan) -> list[str]:
    """The recipe's `launch.seconds_per_step` beside `result`'s floor (both on the launch:
    hardware), and at the same multiple of `here`'s floor when `here` is other hardware."""
    launch, run = result.launch, result.run
    seconds = launch.seconds_per_step if launch is not None else []
    if not seconds or run is None or not launch.gpus:
        return []
    low, high = seconds[0], seconds[-1]
    basis = "measured" if launch.cost_measured else "estimate"
    steps = run.max_steps
    lines = [
        f"  recipe launch.seconds_per_step ({basis}, on this hardware): {_duration(low, high)} per step "
        f"x {steps} max_steps = {_duration(low * steps, high * steps)}"
    ]
    floor = run.seconds / steps
    if not run.complete or floor <= 0:
        lines.append("  (the recipe's figure includes generation, not timed here in server mode)")
        return lines
    ratio = f"{low / floor:.0f}x" if high - low < 0.05 * high else f"{low / floor:.0f}-{high / floor:.0f}x"
    lines.append(
        f"  that is {ratio} the floor per step (RL steps typically run 3-20x a peak-rate floor: "
        "prefill, sampling, weight syncs, rewards, stragglers)"
    )
    lines.append(
        _cost_line(run, result.price, low * steps / 3600, "at that rate cost")
        + ("" if low == high else f", up to ~{_money(run.cost(result.price) * high / floor)}")
    )
    if here is not result and here.run is not None and here.run.complete:
        factor_low, factor_high = low / floor, high / floor
        low_h, high_h = here.run.seconds * factor_low, here.run.seconds * factor_high
        lines.append(
            f"  on the plan's hardware ({here.topology.hardware}) at the same multiple of its floor: "
            f"{_duration(low_h, high_h)}"
        )
        lines.append(
            _cost_line(here.run, here.price, low_h / 3600, "there cost")
            + ("" if low == high else f", up to ~{_money(here.run.cost(here.price) * factor_high)}")
        )
    return lines


def _whole_run(result: RecipePlan) -> list[str]:
    """Hours and cost of the whole run on the plan's hardware and, when the recipe's `launch:`
    hardware differs, on that hardware too: each figure labelled with the hardware it is for."""
    work = result.plan.throughput
    where = "" if work.generation_seconds is not None else " (generation on the vLLM server not estimated)"
    lines = [f"  floor per optimizer step: {work.floor_seconds_per_optimizer_step:.1f} s{where}"]
    if result.run is None:
        return [*lines, "  whole run: not estimated (no max_steps; give --max_steps N)"]
    lines += [
        "",
        "Whole run (floor: peak rates at maximal lengths; checkpoint saves, rewards, prefill, "
        "sampling and weight syncs not timed)",
        *_parts(result),
    ]
    header = result.header
    if header is None:
        lines += _stated(result, result)
        if result.launch is not None and result.launch.seconds_per_step and not result.launch.gpus:
            lines.append("  (the recipe's launch.seconds_per_step is for CPU; the floor above is a GPU's)")
        return lines
    if header.run is None:
        return lines
    theirs, ours = header.batch.generation_batch_size, result.batch.generation_batch_size
    same = "the same rollout batch"
    if theirs != ours:
        same = f"a step there trains on {theirs} completions, here {ours}"
    lines += [
        "",
        f"The recipe's launch: hardware, for comparison ({header.topology.hardware}; {same})",
        f"  ({_rates(header.topology)})",
        f"  whole-run floor {_hours(header.run.seconds)}",
        _cost_line(header.run, header.price),
        *_stated(header, result),
    ]
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


def summary_line(result: RecipePlan) -> str | None:
    """The run's hours and cost in one labelled line, on the plan's hardware: the floor and,
    when the recipe states `launch.seconds_per_step` for this hardware, its own estimate."""
    run, price = result.run, result.price
    if run is None:
        return None
    floor = "floor" if run.complete else "floor of the timed parts"
    parts = [f"{floor} {_hours(run.seconds)} ~{_money(run.cost(price))}"]
    launch = result.launch
    stated = launch is not None and launch.seconds_per_step and launch.gpus and result.header is None
    if stated:
        low, high = launch.seconds_per_step[0], launch.seconds_per_step[-1]
        basis = "measured" if launch.cost_measured else "estimate"
        hours = [seconds * run.max_steps / 3600 for seconds in (low, high)]
        usd = [run.gpus * h * price.usd_per_gpu_hour for h in hours]
        cost = _money(usd[0]) if low == high else f"{_money(usd[0])}-{_money(usd[1])}"
        duration = _duration(low * run.max_steps, high * run.max_steps)
        parts.append(f"recipe's {basis} (launch.seconds_per_step) {duration} ~{cost}")
    return (
        f"Run time and cost: {'; '.join(parts)} ({result.topology.hardware}, "
        f"${price.usd_per_gpu_hour:.2f}/GPU-h)"
    )


def format_recipe_plan(result: RecipePlan) -> str:
    """Every section of the recipe plan, as one string; the last line sums up time and cost."""
    plan = result.plan
    sections = [*_launch(result), "", *_topology(plan)[1:], *_memory_table(plan), *_vllm(plan)]
    sections += _heldout(result) + _verdict(plan) + _work(plan) + _whole_run(result)
    sections += format_step_time(result.step) if result.step is not None else []
    sections += _disk(result)
    summary = summary_line(result)
    if summary:
        sections += ["", summary]
    return "\n".join(sections)
