"""Routing replay (`moe.routing_replay: old`) on one GPU: the first minibatch's flip rate, and what
replay costs per step, on the tiny Qwen3-MoE (gspo_trl.model.tiny.moe) in bf16.

    python scripts/gpu_moe_replay.py [--output-dir runs/gpu-moe]   # one CUDA GPU (scripts/gpu_check.sh)
    python scripts/gpu_moe_replay.py --dry-run                      # CPU, float32, no CUDA call

What it checks. With `routing_replay: old` each rollout batch's first minibatch update runs at
pi_old's weights, so the experts the router would choose are the ones replayed and
`gspo/mb1/routing/flip_rate` must be exactly 0 (docs/moe.md). On CPU in float32 it is; on a GPU the
pi_old forward (no grad, rollout-sized chunks) and the update forward (grad, gradient
checkpointing) run different bf16 kernels, and a near-tie between two experts may break the other
way: this run says whether it does. Logged per optimizer step (logging_steps 1).

The overhead: runs with replay off and old alternate (`--rounds` pairs), each `--steps` optimizer
steps; a step's time is its logged window `perf/wall_s`; the first 2 steps of each run are dropped
(warm-up); the ratio is median(old) / median(off). One process, one GPU; load from other
processes is not controlled (the machine is given whole).

Writes OUTPUT_DIR/gpu_moe_replay.json; exits 1 when a first-minibatch flip rate is not 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_common import cuda_missing  # a sibling module: scripts/ is no package

import gspo_trl.core.metric_names as names

STEPS_PER_GENERATION = 4
WARM_UP_STEPS = 2
OUTPUT = "gpu_moe_replay.json"


def run_overrides(model_dir: Path, run_dir: Path, replay: str, args: argparse.Namespace) -> dict[str, Any]:
    """Digit reversal (gspo_trl.data.synthetic) on the tiny MoE, GSPO's defaults, no held-out
    split: bf16 on the GPU, float32 on CPU for --dry-run."""
    return {
        "model": {
            "name_or_path": str(model_dir),
            "dtype": "float32" if args.dry_run else "bfloat16",
            "extra_init_kwargs": {"output_router_logits": False},  # see bench_moe_routing.recipe_for
        },
        "data": {"path": "synthetic:reversal", "num_rows": 256, "solution_column": "solution"},
        "rewards": ["gspo_trl.data.synthetic:digit_reversal_reward"],
        "moe": {"routing_replay": replay},
        "bf16": not args.dry_run,
        "use_cpu": args.dry_run,
        "steps_per_generation": STEPS_PER_GENERATION,
        "per_device_train_batch_size": 8,
        "num_generations": 8,
        "max_completion_length": 12,
        "gradient_checkpointing": True,
        "max_steps": args.steps,
        "logging_steps": 1,
        "learning_rate": 3e-4,  # the tiny recipe's: routing moves between minibatches
        "output_dir": str(run_dir),
        "report_to": "none",
        "save_strategy": "no",
        "seed": 0,
    }


def one_run(model_dir: Path, run_dir: Path, replay: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Train one run; its per-step metrics.jsonl events."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer

    trainer = build_trainer(load_recipe(None, run_overrides(model_dir, run_dir, replay, args)))
    trainer.train()
    del trainer
    events = [json.loads(line) for line in (run_dir / names.METRICS_FILE).read_text().splitlines()]
    return [event for event in events if names.PERF_WALL in event and "step" in event]


FIRST_MINIBATCH_FLIP_RATE = names.under(names.minibatch(1), names.FLIP_RATE)
"""`gspo/mb1/routing/flip_rate`: logged at the step that ran each rollout batch's first update."""


def first_minibatch_flip_rates(events: list[dict[str, Any]]) -> list[float]:
    """The first minibatch's flip rate of every rollout batch the run logged."""
    return [float(event[FIRST_MINIBATCH_FLIP_RATE]) for event in events if FIRST_MINIBATCH_FLIP_RATE in event]


def step_seconds(events: list[dict[str, Any]]) -> list[float]:
    return [event[names.PERF_WALL] for event in events if event["step"] > WARM_UP_STEPS]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from gspo_trl.model.tiny.moe import save_tiny_moe

    output_dir = Path(args.output_dir)
    model_dir = output_dir / "tiny-moe"
    if not (model_dir / "config.json").is_file():
        save_tiny_moe(model_dir)
    seconds: dict[str, list[float]] = {"off": [], "old": []}
    flips: list[float] = []
    for index in range(args.rounds):
        for replay in ("off", "old") if index % 2 == 0 else ("old", "off"):
            events = one_run(model_dir, output_dir / f"run-{index}-{replay}", replay, args)
            seconds[replay] += step_seconds(events)
            if replay == "old":
                flips += first_minibatch_flip_rates(events)
    ratio = None
    if seconds["off"] and seconds["old"]:
        ratio = statistics.median(seconds["old"]) / statistics.median(seconds["off"])
    return {
        "first_minibatch_flip_rates": flips,
        "median_step_seconds": {mode: statistics.median(s) if s else None for mode, s in seconds.items()},
        "replay_over_off_step_time": ratio,
        "steps_per_run": args.steps,
        "rounds": args.rounds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, float32, 1 round, no CUDA calls")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per run (3 rollout batches)")
    parser.add_argument("--rounds", type=int, default=2, help="off/old pairs, alternating")
    parser.add_argument("--output-dir", default="runs/gpu-moe")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.steps, args.rounds = STEPS_PER_GENERATION, 1
    elif cuda_missing("gpu_moe_replay"):
        return 2
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    result = measure(args)
    (Path(args.output_dir) / OUTPUT).write_text(json.dumps(result, indent=2))
    flips = result["first_minibatch_flip_rates"]
    ratio = result["replay_over_off_step_time"]
    print(f"first-minibatch flip rates under replay (must be 0): {flips}")
    print(f"step time, replay old / off: {'n/a' if ratio is None else f'{ratio:.3f}'}")
    if not flips or any(rate != 0.0 for rate in flips):
        print("gpu_moe_replay: a first-minibatch flip rate is not 0 (or none was logged)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
