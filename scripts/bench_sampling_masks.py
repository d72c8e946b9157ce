"""Top-p/top-k under the engine's log-probs, with and without `engine.sampling_masks: replay`, vLLM-CPU.

    python scripts/bench_sampling_masks.py --quick                  # top_p 0.8 ratios, a few minutes
    python scripts/bench_sampling_masks.py ratios [--samplers top_p=0.8 top_p=0.95 top_k=20]
    python scripts/bench_sampling_masks.py --heldout                # = train with its defaults
    python scripts/bench_sampling_masks.py train [--seeds 0 1 2] [--max-steps 40] [--sampler top_p=0.8]
    python scripts/bench_sampling_masks.py overhead [--rollouts 6]

All on the demo's task (the tiny model warm-started on digit reversal, recipes/tiny/reversal.yaml),
the engine in fp32 through the CPU shim.

ratios: per sampler, the recipe's vLLM samples 32 prompts x 8 and the trainer rescores the tokens
(gspo_trl.diagnose.check_logprobs). Token ratio = pi_trainer / mu per sampled token, off: the
trainer's plain softmax (what every consumer of mu used before replay), on: renormalised over the
replayed kept set. Printed: the share of ratios outside [0.9, 1.1] (TRL PR #7269's measure), the
mean log w_i = mean_t log(pi / mu) per response, the mean kept mass S_t, and the share of tokens
whose replayed gap exceeds 1e-3 nats (a kept set unlike the engine's).

train (--heldout): GSPO at top_p 0.8, greedy held-out exact match after `--max-steps`; arms, each
seed running all four in turn: pi_old from the engine (`engine_*`) or from the trainer with
`engine.correction: truncate` (`trainer_*`), replay off or on. The `_off` arms are what the guard
refuses: they are built with a plain sampler and the driver's `bypass_sampler_guard` then sets it on
TRL's vLLM, a path no recipe or GSPOConfig reaches. overhead: one trainer, rollout batches
alternating replay on and off: median seconds.
Finished train runs are kept in OUTPUT_DIR/runs.jsonl (a rerun skips them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runs as shared  # what the training benchmarks share
from bench_mismatch import warm_model
from bench_runs import RECIPE, VLLM_OVERRIDES  # noqa: F401  (the tests build recipes from them)

SAMPLERS = {
    "top_p=0.8": {"top_p": "0.8"},
    "top_p=0.95": {"top_p": "0.95"},
    "top_k=20": {"top_k": "20"},
    "top_p=0.95,top_k=20": {"top_p": "0.95", "top_k": "20"},  # Qwen3's recommended sampler
}
REPLAY = {"engine.sampling_masks": "replay"}
CORRECTION = {"engine.correction": "truncate"}
ARMS: dict[str, dict[str, str]] = {
    "engine_off": {"engine.old_logprobs": "engine"},
    "engine_on": {"engine.old_logprobs": "engine", **REPLAY},
    "trainer_off": CORRECTION,
    "trainer_on": {**CORRECTION, **REPLAY},
}
GUARD_BYPASS_ARMS = ("engine_off", "trainer_off")
"""The arms the guard refuses (the bug under measurement): built with a plain sampler, then the
sampler set on TRL's vLLM by this script's driver (`bypass_sampler_guard`), a path no recipe or
GSPOConfig reaches."""
TRAIN_SAMPLER = "top_p=0.8"
BAND = (0.9, 1.1)

RATIOS_DRIVER = (
    shared.DRIVER_HEAD
    + """
from gspo_trl.diagnose.check_logprobs import sample_and_recompute

prompts, generations = int(sys.argv[3]), int(sys.argv[4])
trainer = build_trainer(recipe)
dataset = trainer.train_dataset
pairs = sample_and_recompute(trainer, [dataset[i]["prompt"] for i in range(prompts)], generations)
rows = []
for engine, replayed, mass in zip(pairs.engine, pairs.trainer, pairs.log_kept_mass):
    if engine.numel():
        rows.append({"on": (replayed - engine).tolist(), "mass": mass.tolist()})
print("RESULT=" + json.dumps(rows))
"""
)


def ratio_summary(rows: list[dict]) -> dict:
    """From per-response token gaps (log pi_replayed - log mu, and log S_t): off and on figures."""
    import torch

    on = [torch.tensor(r["on"], dtype=torch.float64) for r in rows]
    off = [g + torch.tensor(r["mass"], dtype=torch.float64) for g, r in zip(on, rows, strict=True)]
    out = {"tokens": sum(g.numel() for g in on), "responses": len(on)}
    for name, gaps in (("off", off), ("on", on)):
        tokens = torch.cat(gaps).exp()
        out[f"outside_{name}"] = ((tokens < BAND[0]) | (tokens > BAND[1])).double().mean().item()
        out[f"log_w_{name}"] = torch.stack([g.mean() for g in gaps]).mean().item()
    out["kept_mass"] = torch.cat([torch.tensor(r["mass"]) for r in rows]).double().exp().mean().item()
    out["kept_set_differs"] = (torch.cat(on).abs() > 1e-3).double().mean().item()
    return out


def ratios(model: Path, sampler: str, prompts: int, generations: int, out: Path) -> dict:
    overrides = {
        **VLLM_OVERRIDES,
        **SAMPLERS[sampler],
        **REPLAY,
        "model.name_or_path": str(model),
        "num_generations": str(generations),
        "output_dir": str(out),
    }
    rows = shared.run_driver(
        RATIOS_DRIVER, overrides, str(prompts), str(generations), what=f"ratios at {sampler}"
    )
    return {"sampler": sampler} | ratio_summary(rows)


def ratio_table(results: list[dict]) -> str:
    lines = [
        "| sampler | tokens | mean S_t | ratios outside [0.9, 1.1] off -> on | mean log w_i off -> on | "
        "kept set differs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['sampler']} | {r['tokens']} | {r['kept_mass']:.3f} | {r['outside_off']:.1%} -> "
            f"{r['outside_on']:.1%} | {r['log_w_off']:+.3f} -> {r['log_w_on']:+.1e} | "
            f"{r['kept_set_differs']:.2%} |"
        )
    return "\n".join(lines)


TRAIN_DRIVER = (
    shared.DRIVER_HEAD
    + """
late = json.loads(sys.argv[3])
trainer = build_trainer(recipe)
def bypass_sampler_guard(trainer, sampler):  # script-only: the refused combination, to measure it
    for key, value in sampler.items():
        setattr(trainer.vllm_generation, key, value)
bypass_sampler_guard(trainer, late)
"""
    + shared.TRAIN_AND_SCORE
    + """
def mean_of(key):
    values = [h[key] for h in logs if key in h]
    return sum(values) / len(values) if values else None
print("RESULT=" + json.dumps({
    "before": history[0][1], "after": history[-1][1], "seconds": seconds,
    "kept_mass": mean_of(names.SAMPLING_KEPT_MASS),
    "weight_mean": mean_of(names.CORRECTION_WEIGHT_MEAN),
    "clip": mean_of(names.under(names.OFFPOLICY, names.CLIP_REGION)),
}))
"""
)


def train_arm(
    model: Path,
    arm: str,
    seed: int,
    max_steps: int,
    heldout_rows: int,
    out: Path,
    sampler: str = TRAIN_SAMPLER,
) -> dict:
    settings = {k: int(v) if k == "top_k" else float(v) for k, v in SAMPLERS[sampler].items()}
    late = settings if arm in GUARD_BYPASS_ARMS else {}
    overrides = {
        **VLLM_OVERRIDES,
        **ARMS[arm],
        **({} if late else SAMPLERS[sampler]),
        **shared.heldout_overrides(model, seed, max_steps, heldout_rows, out),
    }
    return {"arm": arm, "seed": seed} | shared.run_driver(
        TRAIN_DRIVER, overrides, json.dumps(late), what=f"{arm} seed {seed}"
    )


def train_table(results: list[dict]) -> str:
    """Markdown: per arm, held-out before -> after (mean over seeds and each seed), the mean loss
    weight of engine.correction and the off-policy clip fraction."""
    lines = [
        "| arm | seeds | held-out before -> after (mean) | after per seed | mean w_i | clip fraction |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for arm in ARMS:
        rows = [r for r in results if r["arm"] == arm]
        if rows:
            before, after = (statistics.mean(r[k] for r in rows) for k in ("before", "after"))
            seeds = ", ".join(f"{r['after']:.3f}" for r in rows)
            extra = [_mean_of(rows, k) for k in ("weight_mean", "clip")]
            lines.append(
                f"| {arm} | {len(rows)} | {before:.3f} -> {after:.3f} | {seeds} | {' | '.join(extra)} |"
            )
    return "\n".join(lines)


def _mean_of(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]
    return f"{statistics.mean(values):.3f}" if values else "-"


OVERHEAD_DRIVER = (
    shared.OVERHEAD_HEAD
    + """
from gspo_trl.training.probes.sampling_masks import SamplingMaskProbe

trainer = build_trainer(recipe)
replay = trainer.probes.find(SamplingMaskProbe).replay
steps = trainer.args.steps_per_generation * trainer.num_iterations // trainer.args.gradient_accumulation_steps
trainer.args.max_steps = steps * (2 + 2 * rollouts)
marks = []
score = trainer._generate_and_score_completions
def alternate(inputs):
    arm = "on" if len(marks) % 2 == 0 else "off"
    replay.active = arm == "on"
    marks.append((arm, time.perf_counter()))
    out = score(inputs)
    marks[-1] = (arm, marks[-1][1], time.perf_counter())
    return out
trainer._generate_and_score_completions = alternate
trainer.train()
spans = {"on": [], "off": []}
for arm, t0, t1 in marks[2:]:  # the first two rollout batches warm up
    spans[arm].append(t1 - t0)
print("RESULT=" + json.dumps(spans))
"""
)


def overhead(model: Path, rollouts: int, out: Path) -> dict:
    overrides = {
        **VLLM_OVERRIDES,
        **SAMPLERS[TRAIN_SAMPLER],
        **ARMS["engine_on"],
        **shared.overhead_overrides(model, out),
    }
    spans = shared.run_driver(OVERHEAD_DRIVER, overrides, str(rollouts), what="overhead run")
    return shared.alternating_medians(spans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="ratios at top_p 0.8 only, 16 prompts x 8")
    parser.add_argument("--prompts", type=int, help="ratios: prompts sampled (default 32; --quick 16)")
    parser.add_argument("--generations", type=int, default=8, help="ratios: completions per prompt")
    parser.add_argument("--sft-steps", type=int, default=800)
    parser.add_argument("--output-dir", type=Path, default=Path("runs/bench-sampling-masks"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--heldout", action="store_true", help="the held-out experiment: `train` with its defaults"
    )
    sub = parser.add_subparsers(dest="command")
    r = sub.add_parser("ratios")
    r.add_argument("--samplers", nargs="+", choices=list(SAMPLERS), default=list(SAMPLERS))
    t = sub.add_parser("train")
    t.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    t.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    t.add_argument("--max-steps", type=int, default=40)
    t.add_argument("--heldout-rows", type=int, default=100)
    t.add_argument("--sampler", choices=list(SAMPLERS), default=TRAIN_SAMPLER)
    o = sub.add_parser("overhead")
    o.add_argument("--rollouts", type=int, default=6, help="measured rollout batches per arm")
    args = parser.parse_args(argv)
    if args.heldout:
        args = argparse.Namespace(**{**vars(t.parse_args([])), **vars(args), "command": "train"})
    model = warm_model(args.output_dir, args.sft_steps)
    result: object
    if args.quick or args.command in (None, "ratios"):
        samplers = ["top_p=0.8"] if args.quick else getattr(args, "samplers", list(SAMPLERS))
        prompts = args.prompts or (16 if args.quick else 32)
        generations = args.generations
        result = [ratios(model, s, prompts, generations, args.output_dir / "ratios") for s in samplers]
        print(ratio_table(result))
        for row in result:
            off, on = row["outside_off"], row["outside_on"]
            print(f"{row['sampler']}: ratios outside [0.9, 1.1]: off {off:.1%}, on {on:.1%}")
    elif args.command == "overhead":
        result = overhead(model, args.rollouts, args.output_dir / "overhead")
        print(
            f"per rollout batch, median of {result['rollouts_each']} each (alternating): replay "
            f"{result['median_on_s']:.2f} s, none {result['median_off_s']:.2f} s, ratio {result['ratio']:.3f}"
        )
    else:
        sampler = args.sampler
        tag = {} if sampler == TRAIN_SAMPLER else {"sampler": sampler}
        cells = [
            (
                {"arm": arm, "seed": seed, "max_steps": args.max_steps, **tag},
                lambda arm=arm, seed=seed: train_arm(
                    model,
                    arm,
                    seed,
                    args.max_steps,
                    args.heldout_rows,
                    args.output_dir / f"{arm}-{seed}{'-' + sampler if tag else ''}",
                    sampler,
                ),
            )
            for seed in args.seeds
            for arm in args.arms  # alternating: each seed runs every arm before the next seed
        ]
        result = shared.run_grid(args.output_dir, cells)
        print(train_table(result))
    shared.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    shared.run_main(main)
