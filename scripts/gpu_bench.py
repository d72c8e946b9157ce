"""GPU throughput bench: a few GSPO steps on random-init Qwen3-0.6B and Qwen3-1.7B on one GPU,
the run's own tokens/s/GPU, phase split and MFU beside `gspo-trl plan`'s floor per step.

    python scripts/gpu_bench.py [--output-dir runs/gpu-bench]   # one CUDA GPU (scripts/gpu_bench.sh)
    python scripts/gpu_bench.py --dry-run                        # CPU, tiny model, no CUDA call

The models are the plan's shipped configs in full (gspo_trl/plan/model_configs, 151,936-row
vocabulary, tied embeddings) at random init, with the tiny model's tokenizer: no hub. Every
completion is exactly --completion tokens (min_new_tokens, scripts/gpu_common.run_overrides);
the script checks it in TRL's logged lengths and the window's token count, and refuses a table
otherwise. One logging window per rollout batch; a row is the last window (after the first
batch's warm-up), read from OUTPUT_DIR/metrics.jsonl: `perf/tokens_per_s`,
`perf/trained_tokens_per_s`, `perf/mfu`, `perf/{phase}_s` over `perf/wall_s` (docs/performance.md).
The floor is `Plan.throughput.floor_seconds_per_optimizer_step` at this GPU's row of
gspo_trl.model.sizing.gpu_rates.

Settings: float32 weights under bf16 autocast (gspo_trl.model.loading.precision), gradient checkpointing,
transformers generate, GSPO's 4 updates per rollout batch of 32 completions (8 per prompt), 512
tokens, 2 rollout batches per model.
Budget, estimated and not measured (no GPU run is recorded): the plan's floor on an H200 is
0.084 s per step for 0.6B and 0.188 s for 1.7B (20-token prompts), 2.2 s for all 16 steps, so
its 230 s budget in scripts/gpu_check.py holds while steps run under ~100x the floor (an
assumption: transformers decodes token by token far above the bandwidth floor), leaving ~200 s
for imports and for building, saving and loading the models (1.2 and 3.4 GB: saved in bf16,
scripts/gpu_common.SAVED_DTYPE, half of float32's 2.3 and 6.9 GB). Each row is written to
OUTPUT_DIR/gpu_bench.json when measured, so a cut-off run keeps its finished rows.

`--dry-run`: the same code on the tiny model on CPU, one rollout batch of 8 x 8 tokens, 2
updates. It checks the wiring; its numbers mean nothing (an H200's floor, setup in the window).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_common as common  # a sibling module: scripts/ is no package

import gspo_trl.core.metric_names as names

MODELS = ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B")
DRY_RUN_MODEL = "tiny"
DRY_RUN_UPDATES = 2
DRY_RUN_GPU = "H200"
"""The GPU row whose floor a --dry-run prints (the GPU this bench is sized for)."""
TRL_MIN_LENGTH, TRL_MAX_LENGTH = "completions/min_length", "completions/max_length"
"""TRL's own keys (`"completions/min_length"`, trl/trainer/grpo_trainer.py:2297-2298): the window's
mean of each generation's shortest and longest completion, in tokens."""
PHASES = (*names.PHASES, names.PHASE_OTHER)
OUTPUT = "gpu_bench.json"


class BenchError(Exception):
    """A run whose numbers would not mean what the table says (one line)."""


def model_spec(model: str) -> Any:
    """The random model to build: the tiny one, or `model`'s shipped architecture in full."""
    from gspo_trl.model.tiny.dense import TinyModelSpec

    if model == DRY_RUN_MODEL:
        return TinyModelSpec()
    config = common.shipped_config(model)
    if not config["tie_word_embeddings"]:  # gspo_trl.model.tiny.dense always ties them
        raise BenchError(f"{model}: untied embeddings; gspo_trl.model.tiny.dense builds tied ones only")
    return TinyModelSpec(
        **common.decoder_fields(config),
        max_position_embeddings=config["max_position_embeddings"],
        model_vocab_size=config["vocab_size"],
    )


def updates_per_rollout_batch(dry_run: bool) -> int:
    """Optimizer steps per rollout batch, also the logging interval (one window each): GSPO's
    default; 2 on a --dry-run (the fewest GSPO takes) to keep it short."""
    from gspo_trl.config.defaults import GSPO_DEFAULTS

    return DRY_RUN_UPDATES if dry_run else int(GSPO_DEFAULTS["steps_per_generation"])


def bench_overrides(model_dir: Path, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    overrides = common.run_overrides(model_dir, args, run_dir)
    overrides.update(steps_per_generation=args.updates, logging_steps=args.updates)
    return overrides


def training_windows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's training log events that carry `perf/*` (one per logging window), in order."""
    path = run_dir / names.METRICS_FILE
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [event for event in events if names.PERF_WALL in event]


def check_windows(windows: list[dict[str, Any]], rollout_batches: int, updates: int, length: int) -> None:
    """One window per rollout batch, `updates` steps each, every completion `length` tokens."""
    steps = [event["step"] for event in windows]
    expected = [updates * (i + 1) for i in range(rollout_batches)]
    if steps != expected:
        raise BenchError(f"logged windows end at steps {steps}, expected {expected} (one per rollout batch)")
    for event in windows:
        shortest, longest = event.get(TRL_MIN_LENGTH), event.get(TRL_MAX_LENGTH)
        if shortest != length or longest != length:
            raise BenchError(
                f"step {event['step']}: completions {shortest}-{longest} tokens, not all {length}: "
                "the lengths are not fixed, so the throughput would depend on the weights"
            )


def measure(model: str, args: argparse.Namespace, output_dir: Path, rates: Any) -> dict[str, Any]:
    """Build, train and read back one model's row."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer

    slug = model.rsplit("/", 1)[-1]
    model_dir = common.build_model(output_dir, f"{slug}-random", model_spec(model), args.dry_run)
    run_dir = output_dir / f"{slug}-run"
    recipe = load_recipe(None, bench_overrides(model_dir, args, run_dir))
    trainer = build_trainer(recipe)
    trainer.train()
    completions = int(trainer.args.generation_batch_size)
    updates = int(trainer.args.steps_per_generation)
    prompt = common.longest_prompt(trainer)
    del trainer
    gc.collect()
    if not args.dry_run:
        import torch

        torch.cuda.empty_cache()
    windows = training_windows(run_dir)
    check_windows(windows, args.rollout_batches, updates, args.completion)
    last = windows[-1]
    generated = completions * args.completion
    if last[names.PERF_GENERATED_TOKENS] != generated:
        raise BenchError(
            f"the measured window generated {last[names.PERF_GENERATED_TOKENS]:g} tokens, "
            f"not {completions} completions x {args.completion}"
        )
    plan = common.plan_run(recipe, model_dir, prompt, rates)
    wall = last[names.PERF_WALL]
    return {
        "model": model,
        "params": plan.shape.total_params,
        "completions_per_rollout_batch": completions,
        "completion_tokens": args.completion,
        "max_prompt_tokens": prompt,
        "updates_per_rollout_batch": updates,
        "measured_rollout_batch": len(windows),
        "generated_tokens_per_s_per_gpu": last[names.PERF_TOKENS_PER_S],
        "trained_tokens_per_s_per_gpu": last[names.PERF_TRAINED_TOKENS_PER_S],
        "update_mfu": last.get(names.PERF_MFU),
        "phase_seconds": {phase: last[names.perf_seconds(phase)] for phase in PHASES},
        "wall_seconds": wall,
        "seconds_per_step": wall / updates,
        "plan_gpu": rates.name if rates is not None else None,
        "plan_floor_seconds_per_step": plan.throughput.floor_seconds_per_optimizer_step if rates else None,
    }


def gpu_rates(dry_run: bool) -> tuple[Any, str]:
    """(the gspo_trl.model.sizing.gpu_rates row the floor is planned at or None, the device in words)."""
    from gspo_trl.model.sizing.gpu_rates import rates_named, rates_of_device

    if dry_run:
        return rates_named(DRY_RUN_GPU), f"CPU, dry run (numbers mean nothing; floor of an {DRY_RUN_GPU})"
    import torch

    name = torch.cuda.get_device_name()
    rates = rates_of_device(name)
    return (
        rates,
        name if rates is not None else f"{name} (not in gspo_trl.model.sizing.gpu_rates: no floor, no MFU)",
    )


def _number(value: float | None, form: str, suffix: str = "") -> str:
    return "n/a" if value is None else format(value, form) + suffix


def report(rows: list[dict[str, Any]], device: str) -> str:
    """The throughput table, then each row's phase split in % of the measured window's wall time."""
    first = rows[0]
    lines = [
        f"GSPO throughput on {device}: rollout batch {first['measured_rollout_batch']} of each run, "
        f"{first['completions_per_rollout_batch']} completions x {first['completion_tokens']} tokens, "
        f"{first['updates_per_rollout_batch']} updates",
        f"{'model':16s} {'params':>8s} {'gen tok/s/GPU':>13s} {'trained tok/s/GPU':>17s} {'MFU upd':>7s} "
        f"{'s/step':>7s} {'plan floor s/step':>17s} {'x floor':>7s}",
    ]
    for row in rows:
        floor, step, mfu = row["plan_floor_seconds_per_step"], row["seconds_per_step"], row["update_mfu"]
        mfu_text = _number(None if mfu is None else 100 * mfu, ".1f", "%")
        times_floor = _number(step / floor if floor else None, ".1f", "x")
        lines.append(
            f"{row['model']:16s} {row['params'] / 1e6:7.1f}M {row['generated_tokens_per_s_per_gpu']:13,.0f} "
            f"{row['trained_tokens_per_s_per_gpu']:17,.0f} {mfu_text:>7s} {step:7.2f} "
            f"{_number(floor, '.3f'):>17s} {times_floor:>7s}"
        )
    lines += ["", "phase split, % of the window's wall time:"]
    widths = [max(6, len(phase)) for phase in PHASES]
    lines.append(f"{'model':16s} " + " ".join(f"{p:>{w}s}" for p, w in zip(PHASES, widths, strict=True)))
    for row in rows:
        shares = [100 * row["phase_seconds"][p] / row["wall_seconds"] for p in PHASES]
        lines.append(
            f"{row['model']:16s} " + " ".join(f"{s:{w}.1f}" for s, w in zip(shares, widths, strict=True))
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = common.one_gpu_parser(__doc__, "runs/gpu-bench", "tiny model, CPU, 2 steps, no CUDA calls")
    parser.add_argument("--rollout-batches", type=int, default=2, help="per model; the last one is measured")
    args = parser.parse_args(argv)
    if args.dry_run:
        from gspo_trl.core.cpu_threads import size_torch_threads

        print(size_torch_threads())
        args.completion, args.batch, args.rollout_batches = min(args.completion, 8), 4, 1
    elif common.cuda_missing("gpu_bench"):
        return 2
    elif args.rollout_batches < 2:
        print("gpu_bench: --rollout-batches must be >= 2 (the first one is the warm-up)", file=sys.stderr)
        return 2
    args.updates = updates_per_rollout_batch(args.dry_run)
    args.steps = args.rollout_batches * args.updates
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    rates, device = gpu_rates(args.dry_run)
    rows: list[dict[str, Any]] = []
    for model in (DRY_RUN_MODEL,) if args.dry_run else MODELS:
        try:
            rows.append(measure(model, args, output_dir, rates))
        except BenchError as error:
            print(f"gpu_bench: {model}: {error}", file=sys.stderr)
            return 1
        (output_dir / OUTPUT).write_text(json.dumps({"device": device, "rows": rows}, indent=2))
    print(report(rows, device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
