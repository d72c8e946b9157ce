"""Overhead of GSPOTrainer's diagnostics: GSPOTrainer vs plain GRPOTrainer, side by side.

Both trainers are built from the same recipe (default recipes/tiny/reversal.yaml, CPU), with
the same seed, so they generate the same completions and make the same updates: the only
difference is the diagnostics. Runs alternate (GRPO, GSPO, GSPO, GRPO, ...) so that load
from other processes hits both alike. Step time = wall time between consecutive optimizer
steps (generation, loss, backward, optimizer, logging), the first 2 steps of each run
dropped as warm-up; both wall time and this process's CPU time are reported (CPU time is
the steadier one when other jobs share the cores). Also measured directly: the time spent
inside the diagnostics code, and (`--by-probe`) inside each probe's events and callbacks (its own
time: what it wraps, `proceed()` and other probes, is not counted).

    .venv/bin/python scripts/bench_diagnostics_overhead.py            # ~2 min on 2 cores
    .venv/bin/python scripts/bench_diagnostics_overhead.py --rounds 8 --steps 12
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections import defaultdict

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import GRPOTrainer

from gspo_trl.config.recipe import load_recipe
from gspo_trl.training.build import build_trainer
from gspo_trl.training.probes.base import Probe
from gspo_trl.training.probes.diagnostics import DiagnosticsProbe


class StepClock(TrainerCallback):
    """Wall and CPU (this process) time between consecutive optimizer steps (s)."""

    def __init__(self) -> None:
        self.stamps: list[tuple[float, float]] = []

    def _stamp(self) -> None:
        self.stamps.append((time.perf_counter(), time.process_time()))

    def on_train_begin(self, args, state, control, **kwargs):
        self.stamps = []
        self._stamp()

    def on_step_end(self, args, state, control, **kwargs):
        self._stamp()

    def durations(self, skip: int, clock: int) -> list[float]:
        """clock 0: wall time, 1: CPU time of this process."""
        return [b[clock] - a[clock] for a, b in zip(self.stamps[:-1], self.stamps[1:], strict=True)][skip:]


def timed(probe: DiagnosticsProbe, name: str, sink: dict[str, float]) -> None:
    """Wrap one of the diagnostics probe's methods to add its run time (s) to sink['own']."""
    method = getattr(probe, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            sink["own"] += time.perf_counter() - start

    setattr(probe, name, wrapper)


class ProbeClock:
    """Each probe's own time (s) in its events, and each callback's in its events, nested calls
    excluded."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []  # time spent in calls nested inside each open call

    def _nested(self, proceed):
        def timed_proceed(*args, **kwargs):
            self._stack.append(0.0)  # absorbs what runs inside: counted once, below
            start = time.perf_counter()
            try:
                return proceed(*args, **kwargs)
            finally:
                self._stack.pop()
                self._stack[-1] += time.perf_counter() - start

        return timed_proceed

    def wrap(self, owner: str, obj: object, name: str) -> None:
        method = getattr(obj, name)

        def wrapper(*args, **kwargs):
            if name.startswith("around_"):  # what it wraps is not its own time
                args = (*args[:-1], self._nested(args[-1]))
            self._stack.append(0.0)
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                nested = self._stack.pop()
                self.seconds[owner] += spent - nested
                if self._stack:
                    self._stack[-1] += spent

        setattr(obj, name, wrapper)

    def attach(self, trainer) -> None:
        events = [n for n in vars(Probe) if not n.startswith("_") and callable(getattr(Probe, n))]
        for probe in trainer.probes:
            owner = type(probe).__name__
            for name in events:
                if name != "callbacks" and getattr(type(probe), name) is not getattr(Probe, name):
                    self.wrap(owner, probe, name)
        for callback in trainer.callback_handler.callbacks:  # the probes' and transformers' own
            owner = f"{type(callback).__name__} (callback)"
            for name in vars(TrainerCallback):
                if name.startswith("on_") and getattr(type(callback), name) is not getattr(
                    TrainerCallback, name
                ):
                    self.wrap(owner, callback, name)


def build(
    kind: str, recipe, own: dict[str, float], probe_clock: ProbeClock | None = None
) -> tuple[GRPOTrainer, StepClock]:
    trainer = build_trainer(recipe)
    if kind == "grpo":  # same model, data, rewards and config; TRL's class
        trainer = GRPOTrainer(
            model=trainer.model,
            reward_funcs=trainer.reward_funcs,
            args=trainer.args,
            train_dataset=trainer.train_dataset,
            processing_class=trainer.processing_class,
        )
    else:
        diagnostics = trainer.probes.find(DiagnosticsProbe)
        timed(diagnostics, "on_loss", own)  # one row per response, gathered
        timed(diagnostics, "statistics", own)  # the gspo/* metrics at each log
        if probe_clock is not None:
            probe_clock.attach(trainer)
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    clock = StepClock()
    trainer.add_callback(clock)
    return trainer, clock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--recipe", default="recipes/tiny/reversal.yaml")
    parser.add_argument("--rounds", type=int, default=6, help="pairs of runs (default 6)")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per run (default 12)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: least noise on shared cores)"
    )
    parser.add_argument("--by-probe", action="store_true", help="also time each probe's own events")
    args = parser.parse_args(argv)
    probe_clock = ProbeClock() if args.by_probe else None
    torch.set_num_threads(args.threads)
    times = {(k, c): [] for k in ("grpo", "gspo") for c in ("wall", "cpu")}
    paired: list[float] = []
    """Per round: the GSPOTrainer run's median wall step over the GRPOTrainer run's beside it."""
    own = {"own": 0.0}
    with tempfile.TemporaryDirectory(prefix="gspo-overhead-") as tmp:
        forced = {"max_steps": args.steps, "logging_steps": 1, "save_strategy": "no", "report_to": "none"}
        recipe = load_recipe(args.recipe, {"output_dir": tmp})
        recipe = dataclasses.replace(recipe, training={**recipe.training, **forced}, heldout=None)
        build_trainer(recipe)  # builds the tiny model once, outside the timed runs
        for r in range(args.rounds):
            round_median = {}
            for kind in ("grpo", "gspo") if r % 2 == 0 else ("gspo", "grpo"):
                trainer, clock = build(kind, recipe, own, probe_clock)
                trainer.train()
                times[kind, "wall"] += clock.durations(skip=2, clock=0)
                times[kind, "cpu"] += clock.durations(skip=2, clock=1)
                round_median[kind] = statistics.median(clock.durations(skip=2, clock=0))
            paired.append(round_median["gspo"] / round_median["grpo"])
    med = {k: statistics.median(v) for k, v in times.items()}
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    own_ms = 1000 * own["own"] / (args.rounds * args.steps)  # over every GSPOTrainer step
    print(f"Diagnostics overhead on {args.recipe}: {args.rounds} x 2 alternating runs of {args.steps} steps")
    print(
        f"{'s/step':14}{'steps':>7} {'wall median':>12} {'wall mean':>10} {'CPU median':>11} {'CPU mean':>9}"
    )
    for kind, label in (("grpo", "GRPOTrainer"), ("gspo", "GSPOTrainer")):
        print(
            f"{label:<14}{len(times[kind, 'wall']):>7} {med[kind, 'wall']:>12.4f} "
            f"{mean[kind, 'wall']:>10.4f} {med[kind, 'cpu']:>11.4f} {mean[kind, 'cpu']:>9.4f}"
        )
    for clock in ("wall", "cpu"):
        ratio_med = med["gspo", clock] / med["grpo", clock]
        ratio_mean = mean["gspo", clock] / mean["grpo", clock]
        print(f"ratio GSPOTrainer / GRPOTrainer ({clock}): median {ratio_med:.3f}, mean {ratio_mean:.3f}")
    print(  # a machine whose speed drifts between rounds moves both runs of a round alike
        "ratio per round (wall medians of the two runs side by side): "
        f"median {statistics.median(paired):.3f}, range {min(paired):.3f}-{max(paired):.3f}"
    )
    print(
        f"time inside the diagnostics code: {own_ms:.2f} ms/step = "
        f"{own_ms / 1000 / med['gspo', 'wall']:.2%} of a median GSPOTrainer step (wall)"
    )
    if probe_clock is not None:
        step = med["gspo", "wall"]
        print("each probe's and callback's own time, ms per GSPOTrainer step, share of a median step:")
        for owner, seconds in sorted(probe_clock.seconds.items(), key=lambda item: -item[1]):
            ms = 1000 * seconds / (args.rounds * args.steps)
            print(f"  {owner:<24}{ms:>8.2f} ms  {ms / 1000 / step:>6.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
