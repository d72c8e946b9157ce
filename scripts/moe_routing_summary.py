"""The numbers and tables of scripts/bench_moe_routing.py, from each run's raw record.

A run's record (OUTPUT_DIR/results/RUN.json) keeps the per-step series the trainer logged
(`KEPT_KEYS`, logging_steps 1), the held-out history and the token log-ratio spreads; every
number below is derived from it here, so a definition can change without training again:

    .venv/bin/python scripts/moe_routing_summary.py OUTPUT_DIR [--match 'spg4-lr0.0003'] [--write PREFIX]

Definitions (per run; "off-policy" = the updates 2..K of each rollout batch):

    flip      gspo/offpolicy/routing/flip_rate: share of (response token, MoE layer) pairs whose
              top-k expert set differs from pi_old's; mean and max over the off-policy updates
    clip      share clipped at the algorithm's own ratio level on the off-policy updates: GRPO
              TRL's clip_ratio/region_mean (tokens), GSPO gspo/offpolicy/clip/region (responses)
    seq std   gspo/offpolicy/log_ratio/std: spread of the sequence log-ratios log s_i, mean
    tok std   std of logp_new - logp_old over the response tokens of one off-policy update, mean
    route tok / route seq   the part routing alone makes: std over response tokens (over responses,
              of the per-response mean) of logp under the routers' own choice minus logp under
              pi_old's replayed routing, both at the update's weights; mean over off-policy updates
    spikes    steps whose grad_norm (TRL's, before clipping) exceeds SPIKE_FACTOR x the median of
              the run's first 20% of steps. Not the whole run's median: once the task saturates
              most minibatches hold only all-correct groups, zero advantage and a ~0 gradient, and
              the median falls with them. spike x = the run's largest grad_norm / that median.
    held-out  greedy exact match on the held-out rows, before -> after
    collapse  any of: a non-finite loss or grad_norm; held-out after < before - HELDOUT_DROP; the
              mean reward of the last 20% of rollout batches < REWARD_FRACTION x the best 20%-window's
    regressed the mean reward of the last 20% of rollout batches < the first rollout batch's (the
              warm start's own samples): training left the policy worse on its own reward than it
              began (the held-out criterion above cannot fire when the warm start's greedy exact
              match is ~0). TRL logs `reward` once per rollout batch, so "steps" in the reward
              criteria are rollout batches.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import gspo_trl.core.metric_names as names

SPIKE_FACTOR = 5.0
HELDOUT_DROP = 0.1
REWARD_FRACTION = 0.5
OFF_FLIP = names.under(names.OFFPOLICY, names.FLIP_RATE)
OFF_FLIP_LAYER_MAX = names.under(names.OFFPOLICY, names.FLIP_RATE_LAYER_MAX)
OFF_CLIP = names.under(names.OFFPOLICY, names.CLIP_REGION)
OFF_SEQ_STD = names.under(names.OFFPOLICY, names.log_ratio("std"))
TRL_CLIP = "clip_ratio/region_mean"
KEPT_KEYS = (
    "step",
    "loss",
    "grad_norm",
    "reward",
    TRL_CLIP,
    OFF_FLIP,
    OFF_FLIP_LAYER_MAX,
    OFF_CLIP,
    OFF_SEQ_STD,
)


def arm_label(algorithm: str, replay: str, spg: int, learning_rate: float) -> str:
    return f"{algorithm} {replay:>3} spg{spg} lr{learning_rate:g}"


def _values(history: list[dict[str, Any]], key: str) -> list[float]:
    return [float(e[key]) for e in history if key in e]


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.fmean(values) if values else math.nan


def collapse_reasons(
    losses: list[float], grad_norms: list[float], rewards: list[float], before: float, after: float
) -> list[str]:
    """Why a run counts as collapsed (empty: it did not); see the module docstring."""
    reasons = []
    if not all(math.isfinite(v) for v in losses + grad_norms):
        reasons.append("non-finite loss/grad")
    if after < before - HELDOUT_DROP:
        reasons.append(f"held-out {before:.2f}->{after:.2f}")
    width = max(1, len(rewards) // 5)
    if len(rewards) >= 2 * width:
        windows = [statistics.fmean(rewards[i : i + width]) for i in range(len(rewards) - width + 1)]
        if windows[-1] < REWARD_FRACTION * max(windows):
            reasons.append(f"reward {max(windows):.2f}->{windows[-1]:.2f}")
    return reasons


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """One table row from a run's raw record."""
    history = record["history"]
    offpolicy = [e for e in history if OFF_FLIP in e]
    flips = _values(offpolicy, OFF_FLIP)
    clip = _values(offpolicy, TRL_CLIP if record["algorithm"] == "grpo" else OFF_CLIP)
    grad_norms = _values(history, "grad_norm")
    early = [g for g in grad_norms[: max(1, len(grad_norms) // 5)] if math.isfinite(g)]
    baseline = statistics.median(early) if early else math.nan
    finite = [g for g in grad_norms if math.isfinite(g)]
    rewards = _values(history, "reward")
    token_std = record["token_log_ratio_std"]
    before, after = record["heldout"][0][1], record["heldout"][-1][1]
    fifth = max(1, len(rewards) // 5)
    return {
        **{k: record[k] for k in ("run", "algorithm", "replay", "spg", "learning_rate", "seed", "seconds")},
        "steps": len(grad_norms),
        "flip_mean": _mean(flips),
        "flip_max": max(flips, default=math.nan),
        "flip_layer_max": max(_values(offpolicy, OFF_FLIP_LAYER_MAX), default=math.nan),
        "clip_offpolicy": _mean(clip),
        "seq_log_ratio_std": _mean(_values(offpolicy, OFF_SEQ_STD)),
        "token_log_ratio_std": _mean(token_std),
        "token_log_ratio_std_max": max(token_std, default=math.nan),
        "routing_token_std": _mean(record.get("routing_token_std", [])),
        "routing_seq_std": _mean(record.get("routing_seq_std", [])),
        "grad_norm_early_median": baseline,
        "grad_spikes": sum(1 for g in finite if g > SPIKE_FACTOR * baseline),
        "grad_spike_max_x": max(finite, default=math.nan) / baseline if finite else math.nan,
        "heldout_before": before,
        "heldout_after": after,
        "heldout_gain": after - before,
        "reward_start": rewards[0] if rewards else math.nan,
        "reward_last_20pct": _mean(rewards[-fifth:]),
        "regressed": bool(rewards and _mean(rewards[-fifth:]) < rewards[0]),
        "collapse": collapse_reasons(_values(history, "loss"), grad_norms, rewards, before, after),
    }


COLUMNS = (  # (header, row key, format)
    ("flip", "flip_mean", "{:.2%}"),
    ("flip max", "flip_max", "{:.2%}"),
    ("clip", "clip_offpolicy", "{:.3f}"),
    ("seq std", "seq_log_ratio_std", "{:.4f}"),
    ("tok std", "token_log_ratio_std", "{:.4f}"),
    ("route tok", "routing_token_std", "{:.4f}"),
    ("route seq", "routing_seq_std", "{:.4f}"),
    ("spikes", "grad_spikes", "{:.1f}"),
    ("spike x", "grad_spike_max_x", "{:.1f}"),
    ("before", "heldout_before", "{:.3f}"),
    ("after", "heldout_after", "{:.3f}"),
    ("gain", "heldout_gain", "{:+.3f}"),
    ("reward start", "reward_start", "{:.3f}"),
    ("reward end", "reward_last_20pct", "{:.3f}"),
)


def _cell(fmt: str, values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.fmean(values))} ±{fmt.format(statistics.stdev(values)).lstrip('+')}"


def table(rows: list[dict[str, Any]], per_seed: bool) -> str:
    """Markdown: a line a run (per_seed), or a line an arm with mean ±std over its seeds; arms
    in their first row's order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        label = arm_label(row["algorithm"], row["replay"], row["spg"], row["learning_rate"])
        groups.setdefault(label + (f" s{row['seed']}" if per_seed else ""), []).append(row)
    header = [
        "run" if per_seed else "arm",
        "n",
        *(h for h, _, _ in COLUMNS),
        "regressed",
        "collapses",
        "s/run",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, group in groups.items():
        cells = [_cell(fmt, [float(r[key]) for r in group]) for _, key, fmt in COLUMNS]
        collapsed = sum(1 for r in group if r["collapse"])
        why = "; ".join(sorted({c for r in group for c in r["collapse"]}))
        seconds = statistics.fmean(r["seconds"] for r in group)
        lines.append(
            f"| {label} | {len(group)} | "
            + " | ".join(cells)
            + f" | {sum(1 for r in group if r['regressed'])}/{len(group)} | {collapsed}/{len(group)}"
            f"{' (' + why + ')' if why else ''} | {seconds:.0f} |"
        )
    return "\n".join(lines)


CURVE = ("flip", "flip max", "clip", "tok std", "route tok", "spikes", "after", "reward start", "reward end")


def curve(rows: list[dict[str, Any]]) -> str:
    """Instability against the measured flip rate: the per-arm lines, a few columns, ordered by
    algorithm, replay, then mean flip rate."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["algorithm"], row["replay"], row["spg"], row["learning_rate"]), []).append(row)
    order = sorted(groups, key=lambda k: (k[0], k[1], _mean([r["flip_mean"] for r in groups[k]])))
    columns = [c for c in COLUMNS if c[0] in CURVE]
    header = ["algorithm", "replay", "spg", "lr", "n", *(h for h, _, _ in columns), "regressed", "collapses"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in order:
        group = groups[key]
        cells = [_cell(fmt, [float(r[k]) for r in group]) for _, k, fmt in columns]
        regressed = sum(1 for r in group if r["regressed"])
        collapsed = sum(1 for r in group if r["collapse"])
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]:g} | {len(group)} | "
            + " | ".join(cells)
            + f" | {regressed}/{len(group)} | {collapsed}/{len(group)} |"
        )
    return "\n".join(lines)


def tables(records: list[dict[str, Any]], heading: str) -> tuple[str, list[dict[str, Any]]]:
    """The report's text (per arm, the flip-rate curve, per run) and its rows."""
    rows = [summarize(r) for r in records]
    text = (
        f"{heading}\n\nPer arm, mean ±std over seeds:\n\n{table(rows, per_seed=False)}\n\n"
        f"Instability against the flip rate (per arm, ordered by flip rate):\n\n{curve(rows)}\n\n"
        f"Per run:\n\n{table(rows, per_seed=True)}\n"
    )
    return text, rows


RECIPE_LR = 3e-4
"""recipes/tiny/reversal.yaml's learning rate, the sweep's 1x."""
DOCS_POINTS = ((1, 4), (1, 8), (1, 16), (3, 8), (10, 4), (10, 8))
"""(learning-rate multiple, minibatches per rollout batch): docs/moe.md's rows."""


def docs_table(rows: list[dict[str, Any]]) -> str:
    """docs/moe.md's summary table, from the summary rows (rows.jsonl); tests/test_docs_moe.py
    checks that the page holds exactly this."""
    lines = [
        "| learning rate, updates per rollout | off-policy flip rate (arm means) "
        "| GRPO held-out after (off / R2) | GSPO held-out after (off / R2) "
        "| collapses of 3 (GRPO off / R2, GSPO off / R2) |",
        "|---|---|---|---|---|",
    ]
    for multiple, spg in DOCS_POINTS:
        point = [
            r for r in rows if r["spg"] == spg and math.isclose(r["learning_rate"], multiple * RECIPE_LR)
        ]
        arm = {
            (a, replay): [r for r in point if r["algorithm"] == a and r["replay"] == replay]
            for a in ("grpo", "gspo")
            for replay in ("off", "old")
        }
        flips = [statistics.mean(r["flip_mean"] for r in runs) for runs in arm.values()]
        after = {k: statistics.mean(r["heldout_after"] for r in runs) for k, runs in arm.items()}
        collapses = {k: sum(bool(r["collapse"]) for r in runs) for k, runs in arm.items()}
        lr = "recipe's 3e-4" if multiple == 1 else f"{multiple}x"
        lines.append(
            f"| {lr}, {spg} | {min(flips):.1%}-{max(flips):.1%} "
            f"| {after['grpo', 'off']:.2f} / {after['grpo', 'old']:.2f} "
            f"| {after['gspo', 'off']:.2f} / {after['gspo', 'old']:.2f} "
            f"| {collapses['grpo', 'off']} / {collapses['grpo', 'old']}, "
            f"{collapses['gspo', 'off']} / {collapses['gspo', 'old']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("output_dir", type=Path, help="bench_moe_routing.py's --output-dir")
    parser.add_argument("--match", default="", help="only the runs whose id matches this regex")
    parser.add_argument("--write", type=Path, help="also write PREFIX_table.md and PREFIX_rows.jsonl")
    parser.add_argument("--heading", default="", help="the tables' first line")
    args = parser.parse_args(argv)
    paths = sorted((args.output_dir / "results").glob("*.json"))
    records = [json.loads(p.read_text()) for p in paths]
    records = [r for r in records if re.search(args.match, r["run"])]
    if not records:
        raise SystemExit(f"{args.output_dir / 'results'}: no run record matches {args.match!r}")
    records.sort(key=lambda r: (r["learning_rate"], r["spg"], r["algorithm"], r["replay"], r["seed"]))
    text, rows = tables(records, args.heading or f"## {len(records)} runs in {args.output_dir}")
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.write}_table.md").write_text(text)
        Path(f"{args.write}_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
