"""Routing replay (`moe.routing_replay: old`) on one GPU: the first minibatch's expert flips, counted
over (response token, MoE layer) pairs in float32 and in bf16, and what replay costs per step, on
the tiny Qwen3-MoE (gspo_trl.model.tiny.moe).

    python scripts/gpu_moe_replay.py [--output-dir runs/gpu-moe]   # one CUDA GPU (scripts/gpu_check.sh)
    python scripts/gpu_moe_replay.py --dry-run                      # CPU, no CUDA call

What it checks. With `routing_replay: old` each rollout batch's first minibatch update runs at
pi_old's weights, so the router's own choice and the replayed one differ only where the pi_old
forward (no grad, rollout-sized chunks) and the update forward (grad, gradient checkpointing)
round differently and a near-tie between two experts breaks the other way (docs/moe.md). In
float32 on CPU that never happens; GPU kernels (grouped GEMMs, split-K) can flip a tie by an ulp.
So flips are counted, not asked to be 0: `gspo/mb1/routing/flip_rate` times the pairs it is over
(8 completions x 12 tokens, every completion exactly 12 by min_new_tokens, x the MoE layers), and a
row fails above its NOISE_FLOOR share of the pairs. A replay that feeds the update other tokens'
or layers' experts, or a pi_old forward that computes something else, flips far more: the
off-policy minibatches of this task flip ~8% of pairs (docs/moe.md).

Two rows: float32 (no autocast) and bf16 (bf16 weights under autocast: the 30B-A3B recipe's
`dtype: bfloat16`, `bf16: true`). Beside them, `precision_change_flips`: the pairs whose expert set
differs between a float32 and a bf16 forward of the same model and prompts, a whole precision
change (0.72% of 3,072 pairs on the tiny MoE on CPU), which two bf16 kernels should stay under.

The overhead, in bf16 (float32 on a --dry-run): runs with replay off and old alternate (`--rounds`
pairs), each `--steps` optimizer steps, then one float32 `old` run per round; a step's time is its
logged window `perf/wall_s`; the first 2 steps of each run are dropped (warm-up); the ratio is
median(old) / median(off). One process, one GPU.

Writes OUTPUT_DIR/gpu_moe_replay.json; exits 1 when a row is above its floor or logged nothing.
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
COMPLETION_TOKENS = 12
MINIBATCH = 8
OUTPUT = "gpu_moe_replay.json"
NOISE_FLOOR = {"float32": 0.001, "bf16": 0.01}
"""The share of first-minibatch (token, layer) pairs that may flip. bf16: above the 0.72% a
whole float32-to-bf16 change flips on this model (`precision_change_flips`; 0.81% of its pairs
have their k-th and (k+1)-th router logits within 2^-8 of the row's largest, one bf16 rounding),
which two bf16 kernels of the same model, both rounding to bf16, should not exceed. float32: its
rounding is 2^-16 times finer, so about none of the pairs are that close; the floor allows 2 of
the GPU run's 2,304 pairs (ties that a different accumulation order breaks)."""
PRECISIONS = ("float32", "bf16")
DRY_RUN_STEPS, DRY_RUN_OTHER_STEPS = 2, 1
"""A --dry-run's float32 runs and its bf16 row: step 1 logs the first minibatch, which is all a
dry run checks (bf16 on CPU is slow, ~8 s a step; with no step past the warm-up, no ratio)."""


def run_overrides(
    model_dir: Path, run_dir: Path, replay: str, args: argparse.Namespace, precision: str = "bf16"
) -> dict[str, Any]:
    """Digit reversal (gspo_trl.data.synthetic) on the tiny MoE, GSPO's defaults, no held-out
    split, every completion COMPLETION_TOKENS long: `precision` float32 or bf16 (bf16 weights
    under bf16 autocast, the 30B-A3B recipe's)."""
    bf16 = precision == "bf16"
    return {
        "model": {
            "name_or_path": str(model_dir),
            "dtype": "bfloat16" if bf16 else "float32",
            "extra_init_kwargs": {"output_router_logits": False},  # see bench_moe_routing.recipe_for
        },
        "data": {"path": "synthetic:reversal", "num_rows": 256, "solution_column": "solution"},
        "rewards": ["gspo_trl.data.synthetic:digit_reversal_reward"],
        "moe": {"routing_replay": replay},
        "bf16": bf16,
        "use_cpu": args.dry_run,
        "steps_per_generation": STEPS_PER_GENERATION,
        "per_device_train_batch_size": MINIBATCH,
        "num_generations": 8,
        "max_completion_length": COMPLETION_TOKENS,
        "generation_kwargs": {"min_new_tokens": COMPLETION_TOKENS},  # scripts/gpu_common.run_overrides
        "gradient_checkpointing": True,
        "max_steps": args.steps,
        "logging_steps": 1,
        "learning_rate": 3e-4,  # the tiny recipe's: routing moves between minibatches
        "output_dir": str(run_dir),
        "report_to": "none",
        "save_strategy": "no",
        "seed": 0,
    }


def one_run(
    model_dir: Path,
    run_dir: Path,
    replay: str,
    args: argparse.Namespace,
    precision: str,
    steps: int | None = None,
) -> list[dict[str, Any]]:
    """Train one run (`steps`, else args.steps); its per-step metrics.jsonl events."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer

    overrides = run_overrides(model_dir, run_dir, replay, args, precision)
    if steps is not None:
        overrides["max_steps"] = steps
    trainer = build_trainer(load_recipe(None, overrides))
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


def moe_layers(config: Any) -> int:
    """Decoder layers with a sparse MoE block, by Qwen3-MoE's own rule (`if (layer_idx not in
    config.mlp_only_layers) and (config.num_experts > 0 and (layer_idx + 1) %
    config.decoder_sparse_step == 0)`, transformers/models/qwen3_moe/modeling_qwen3_moe.py:309-311)."""
    skip, step = set(config.mlp_only_layers), config.decoder_sparse_step
    layers = range(config.num_hidden_layers)
    return sum(1 for i in layers if i not in skip and config.num_experts > 0 and (i + 1) % step == 0)


def flip_row(precision: str, rates: list[float], layers: int) -> dict[str, Any]:
    """One precision's first-minibatch flips: a count over (token, layer) pairs against its floor.
    Each logged rate is over one minibatch's MINIBATCH x COMPLETION_TOKENS tokens x `layers`."""
    pairs_each = MINIBATCH * COMPLETION_TOKENS * layers
    flips = round(sum(rate * pairs_each for rate in rates))
    pairs = pairs_each * len(rates)
    floor = NOISE_FLOOR[precision]
    return {
        "precision": precision,
        "flips": flips,
        "pairs": pairs,
        "noise_floor": floor,
        "passed": pairs > 0 and flips <= floor * pairs,
        "first_minibatch_flip_rates": rates,
    }


def precision_change_flips(model_dir: Path) -> dict[str, float]:
    """(token, layer) pairs whose top-k expert set differs between a float32 and a bf16 forward
    of the tiny MoE on 64 digit-reversal-like prompts, on CPU: the size of a whole precision
    change, which NOISE_FLOOR's bf16 share is set above."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = tokenizer(
        [f"Reverse the digits: {i * 7919 % 100000}" for i in range(64)], return_tensors="pt", padding=True
    )
    chosen = []
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        with torch.no_grad():
            logits = torch.stack(model(**batch, output_router_logits=True).router_logits).float()
        chosen.append(logits.topk(model.config.num_experts_per_tok, dim=-1).indices.sort(dim=-1).values)
    differs = (chosen[0] != chosen[1]).any(dim=-1)
    return {"flips": int(differs.sum()), "pairs": differs.numel()}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from gspo_trl.model.tiny.moe import save_tiny_moe

    output_dir = Path(args.output_dir)
    model_dir = output_dir / "tiny-moe"
    if not (model_dir / "config.json").is_file():
        save_tiny_moe(model_dir)
    from transformers import AutoConfig

    layers = moe_layers(AutoConfig.from_pretrained(model_dir))
    timed = "float32" if args.dry_run else "bf16"  # the overhead's precision: the recipe's on a GPU
    other = next(p for p in PRECISIONS if p != timed)
    seconds: dict[str, list[float]] = {"off": [], "old": []}
    rates: dict[str, list[float]] = {precision: [] for precision in PRECISIONS}
    for index in range(args.rounds):
        for replay in ("off", "old") if index % 2 == 0 else ("old", "off"):
            events = one_run(model_dir, output_dir / f"run-{index}-{timed}-{replay}", replay, args, timed)
            seconds[replay] += step_seconds(events)
            if replay == "old":
                rates[timed] += first_minibatch_flip_rates(events)
        steps = DRY_RUN_OTHER_STEPS if args.dry_run else args.steps
        run = one_run(model_dir, output_dir / f"run-{index}-{other}-old", "old", args, other, steps)
        rates[other] += first_minibatch_flip_rates(run)
    ratio = None
    if seconds["off"] and seconds["old"]:
        ratio = statistics.median(seconds["old"]) / statistics.median(seconds["off"])
    return {
        "rows": [flip_row(precision, rates[precision], layers) for precision in PRECISIONS],
        "precision_change_flips": precision_change_flips(model_dir),
        "median_step_seconds": {mode: statistics.median(s) if s else None for mode, s in seconds.items()},
        "replay_over_off_step_time": ratio,
        "overhead_precision": timed,
        "steps_per_run": args.steps,
        "rounds": args.rounds,
    }


def report(result: dict[str, Any]) -> str:
    """One line per precision, the precision change's flips, and replay's step-time ratio."""
    lines = []
    for row in result["rows"]:
        share = row["flips"] / row["pairs"] if row["pairs"] else float("nan")
        verdict = "ok" if row["passed"] else "ABOVE THE FLOOR"
        lines.append(
            f"{row['precision']:8s} first-minibatch flips {row['flips']} of {row['pairs']} (token, layer) "
            f"pairs ({share:.2%}; floor {row['noise_floor']:.1%}): {verdict}"
        )
    change, ratio = result["precision_change_flips"], result["replay_over_off_step_time"]
    lines.append(f"float32 vs bf16 forward: {change['flips']} of {change['pairs']} pairs flip")
    shown = "n/a" if ratio is None else f"{ratio:.3f}"
    lines.append(f"step time, replay old / off ({result['overhead_precision']}): {shown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, 1 round, no CUDA calls")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per run (3 rollout batches)")
    parser.add_argument("--rounds", type=int, default=2, help="off/old pairs, alternating")
    parser.add_argument("--output-dir", default="runs/gpu-moe")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.steps, args.rounds = DRY_RUN_STEPS, 1
    elif cuda_missing("gpu_moe_replay"):
        return 2
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    result = measure(args)
    (Path(args.output_dir) / OUTPUT).write_text(json.dumps(result, indent=2))
    print(report(result))
    if not all(row["passed"] for row in result["rows"]):
        print("gpu_moe_replay: first-minibatch flips above the noise floor (or none logged)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
