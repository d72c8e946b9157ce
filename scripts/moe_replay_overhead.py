"""What routing replay (moe.routing_replay: old) costs per step on the tiny MoE, measured side by
side with routing_replay: off (scripts/bench_moe_routing.py overhead calls `measure`).

Two measurements, each alternating the modes so that load from other processes hits both alike:

1. Whole optimizer steps: GSPOTrainer runs of the benchmark recipe (spg 4, no held-out) built
   with `build_trainer`, replay off and old alternating (`rounds` pairs after one warm-up run);
   step time = time between consecutive optimizer steps (StepClock of
   scripts/bench_diagnostics_overhead.py), the first 2 of each run dropped. Wall and process CPU
   time; ratios of the medians, and the median over rounds of each round's ratio.
2. The update pass alone, where replay is the only difference: one model, one minibatch shaped
   like the benchmark's (16 rows x 40 tokens), forward + backward under the trainer's
   RoutingHooks in three modes, alternating: `idle` (no pass: what a model without the routing
   diagnostics runs), `compare` (routing_replay off: the router's choice compared with pi_old's)
   and `replay` (old: pi_old's experts forced, gate weights recomputed). Median of the per-pass
   ratios.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gspo_trl.model.routing.hooks import RoutingHooks

PASS_SHAPE = (16, 40)
"""Rows x tokens of one update minibatch in the benchmark: 16 completions, prompt + answer ~40."""


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def whole_steps(run: Callable[[str], Any], rounds: int) -> tuple[dict[tuple[str, str], list[float]], list]:
    """Per-step times {(mode, clock): seconds} over alternating runs, and each round's ratios."""
    times: dict[tuple[str, str], list[float]] = {(m, c): [] for m in ("off", "old") for c in ("wall", "cpu")}
    per_round = []
    run("off")  # warm-up: imports, first-call costs
    for r in range(rounds):
        mine: dict[tuple[str, str], list[float]] = {}
        for mode in ("off", "old") if r % 2 == 0 else ("old", "off"):
            clock = run(mode)
            for index, name in enumerate(("wall", "cpu")):
                mine[mode, name] = clock.durations(skip=2, clock=index)
                times[mode, name] += mine[mode, name]
        per_round.append(
            {
                c: statistics.median(mine["old", c]) / statistics.median(mine["off", c])
                for c in ("wall", "cpu")
            }
            | {f"total_{c}": sum(mine["old", c]) / sum(mine["off", c]) for c in ("wall", "cpu")}
            | {"load": _load()}
        )
    return times, per_round


def update_passes(model_dir: Path, passes: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) seconds of forward + backward per mode, modes rotated every pass."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, output_router_logits=False)
    model.train()
    hooks = RoutingHooks(model)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, PASS_SHAPE, generator=generator)
    hooks.begin(record=True)
    with torch.no_grad():
        model(input_ids=ids)
    routing = hooks.end().routing()
    modes = {"idle": None, "compare": False, "replay": True}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    for i in range(passes + 1):  # the first round is a warm-up
        order = list(modes)[i % 3 :] + list(modes)[: i % 3]
        for mode in order:
            wall, cpu = time.perf_counter(), time.process_time()
            if modes[mode] is not None:
                hooks.begin(reference=routing, replay=modes[mode])
            model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
            hooks.end()
            model.zero_grad(set_to_none=True)
            if i:
                times[mode].append((time.perf_counter() - wall, time.process_time() - cpu))
    hooks.remove()
    return times


def _ratio(times: dict[str, list[tuple[float, float]]], a: str, b: str, clock: int) -> float:
    return statistics.median(x[clock] / y[clock] for x, y in zip(times[a], times[b], strict=True))


def measure(run: Callable[[str], Any], model_dir: Path, rounds: int, steps: int, passes: int) -> str:
    """Both measurements as a markdown report (printed by the caller and written beside the runs)."""
    started_load = _load()
    times, per_round = whole_steps(run, rounds)
    passes_times = update_passes(model_dir, passes)
    lines = [
        f"## replay overhead: GSPO, spg 4, {torch.get_num_threads()} torch thread(s), "
        f"{os.cpu_count()} cores; load (1 min) at the start {started_load}, after each round "
        f"{' '.join(r['load'] for r in per_round)}, at the end {_load()}",
        "",
        f"1. Whole steps: {rounds} x 2 alternating runs of {steps} steps (first 2 of each dropped), "
        "after 1 warm-up run",
        "",
        "| routing_replay | steps | wall median s | wall mean s | CPU median s | CPU mean s |",
        "|---|---|---|---|---|---|",
    ]
    for mode in ("off", "old"):
        wall, cpu = times[mode, "wall"], times[mode, "cpu"]
        lines.append(
            f"| {mode} | {len(wall)} | {statistics.median(wall):.4f} | {statistics.fmean(wall):.4f} | "
            f"{statistics.median(cpu):.4f} | {statistics.fmean(cpu):.4f} |"
        )
    lines.append("")
    for clock in ("wall", "cpu"):
        pooled = statistics.median(times["old", clock]) / statistics.median(times["off", clock])
        rounds_ratio = statistics.median(r[clock] for r in per_round)
        each = " ".join(f"{r[clock]:.3f}" for r in per_round)
        lines.append(
            f"- old / off ({clock}): ratio of the pooled medians {pooled:.3f}; median of the rounds' "
            f"ratios {rounds_ratio:.3f} (rounds: {each})"
        )
    for clock in ("wall", "cpu"):
        # A median step is an update-only step (3 of 4 steps): the sum counts the rollout steps,
        # where pi_old's forward records the routing, too.
        totals = [r[f"total_{clock}"] for r in per_round]
        lines.append(
            f"- old / off ({clock}), a run's total (sum of its steps): median of the rounds' ratios "
            f"{statistics.median(totals):.3f} (rounds: {' '.join(f'{t:.3f}' for t in totals)})"
        )
    lines += [
        "",
        f"2. The update pass alone (forward + backward, {PASS_SHAPE[0]} x {PASS_SHAPE[1]} tokens), "
        f"{passes} passes per mode, modes rotated",
        "",
        "| mode | wall median ms | CPU median ms |",
        "|---|---|---|",
    ]
    for mode, values in passes_times.items():
        lines.append(
            f"| {mode} | {1000 * statistics.median(v[0] for v in values):.2f} | "
            f"{1000 * statistics.median(v[1] for v in values):.2f} |"
        )
    lines.append("")
    for a, b in (("replay", "compare"), ("compare", "idle"), ("replay", "idle")):
        lines.append(
            f"- {a} / {b}: median per-pass ratio {_ratio(passes_times, a, b, 0):.3f} (wall), "
            f"{_ratio(passes_times, a, b, 1):.3f} (CPU)"
        )
    return "\n".join(lines) + "\n"


def trainer_run(recipe: Any) -> Callable[[str], Any]:
    """A `run(mode)` that trains `recipe` with moe.routing_replay = mode and returns its StepClock."""
    from bench_diagnostics_overhead import StepClock
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from gspo_trl.training.build import build_trainer

    def run(mode: str) -> Any:
        moe = dataclasses.replace(recipe.moe, routing_replay=mode)
        output_dir = f"{recipe.training['output_dir']}/{mode}"
        training = {**recipe.training, "output_dir": output_dir}
        trainer = build_trainer(dataclasses.replace(recipe, moe=moe, training=training, heldout=None))
        for callback in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(callback)
        clock = StepClock()
        trainer.add_callback(clock)
        trainer.train()
        return clock

    return run
