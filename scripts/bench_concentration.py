"""Concentration of the sequence log-ratio: why GSPO's clip range is 1e-4, and why to measure it.

Reproduces docs/gspo.md ("A few tokens drive the ratio"): independent N(0, sigma^2) noise on every token
log-ratio, `--responses` responses per length. The token log-ratio spread stays sigma at
every length; the sequence log-ratio log s_i (the token mean) shrinks as sigma / sqrt(L).
A fixed token range [0.8, 1.27] clips the same share of tokens at every length, while the
paper's sequence range [1 - 3e-4, 1 + 4e-4] is left by most responses unless the per-token
drift is far below sigma = 0.1.

    .venv/bin/python scripts/bench_concentration.py            # ~2 s on 2 cores
"""

from __future__ import annotations

import argparse
import math

import torch

TOKEN_RANGE = (0.2, 0.27)  # the toy benchmark's GRPO clip: ratios outside [0.8, 1.27]
PAPER_RANGE = (3e-4, 4e-4)  # GSPO paper: s outside [1 - 3e-4, 1 + 4e-4]


def outside(log_ratio: torch.Tensor, eps_low: float, eps_high: float) -> float:
    """Fraction of ratios exp(log_ratio) outside [1 - eps_low, 1 + eps_high]."""
    lo, hi = math.log(1 - eps_low), math.log(1 + eps_high)
    return ((log_ratio < lo) | (log_ratio > hi)).double().mean().item()


def simulate(
    lengths: list[int], responses: int = 20_000, sigma: float = 0.1, seed: int = 0, chunk: int = 2_000
) -> list[dict[str, float]]:
    """One row per length: token and sequence spreads and out-of-range fractions (0-1)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for length in lengths:
        seq, tok_sum, tok_sq, tok_out, n_tok = [], 0.0, 0.0, 0.0, 0
        for start in range(0, responses, chunk):
            n = min(chunk, responses - start)
            x = sigma * torch.randn(n, length, generator=g)
            seq.append(x.mean(-1))
            tok_sum += x.double().sum().item()
            tok_sq += x.double().pow(2).sum().item()
            tok_out += outside(x, *TOKEN_RANGE) * x.numel()
            n_tok += x.numel()
        log_s = torch.cat(seq)
        tok_mean = tok_sum / n_tok
        rows.append(
            {
                "length": length,
                "token_spread": math.sqrt(tok_sq / n_tok - tok_mean**2),
                "sequence_spread": log_s.double().std().item(),
                "theory": sigma / math.sqrt(length),
                "token_outside_token_range": tok_out / n_tok,
                "sequence_outside_paper_range": outside(log_s, *PAPER_RANGE),
            }
        )
    return rows


def format_table(rows: list[dict[str, float]], sigma: float, responses: int) -> str:
    head = (
        f"Concentration at sigma = {sigma} ({responses:,} responses per length)\n"
        f"{'tokens':>7} {'token spread':>13} {'log s_i spread':>15} {'sigma/sqrt(L)':>14} "
        f"{'tokens out [0.8,1.27]':>22} {'responses out [1-3e-4,1+4e-4]':>30}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['length']:>7,} {r['token_spread']:>13.3f} {r['sequence_spread']:>15.4f} "
            f"{r['theory']:>14.4f} "
            f"{r['token_outside_token_range']:>22.1%} {r['sequence_outside_paper_range']:>30.1%}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    parser.add_argument("--responses", type=int, default=20_000)
    parser.add_argument("--sigma", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = simulate(args.lengths, args.responses, args.sigma, args.seed)
    print(format_table(rows, args.sigma, args.responses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
