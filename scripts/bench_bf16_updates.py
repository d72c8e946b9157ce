"""How many weights an lr-1e-6 AdamW step really changes: pure bf16 vs fp32 weights + bf16 autocast.

Plain DDP keeps no fp32 master copy: with `model.dtype: bfloat16` the optimizer adds its
update straight onto bf16 weights. Adam's step is about lr (1e-6) per element whatever the
gradient's scale, while a bf16 weight of magnitude ~0.02 has a spacing of ~1e-4 (8 bits of
mantissa), so the update rounds back to the same value for every weight above ~2.5e-4 in
size: most of the model never moves. fp32 weights (the optimizer's precision) with bf16
autocast (the matmuls' precision) keep every update. DeepSpeed keeps fp32 masters itself,
which is why `gspo_config` upcasts a bfloat16 dtype only without DeepSpeed.

The tiny model, one fixed batch of random tokens, N AdamW steps (weight decay 0.1 as in the
recipes); "changed" = the weight's stored value differs from its initial value.

    .venv/bin/python scripts/bench_bf16_updates.py             # ~5 s on 2 cores
    .venv/bin/python scripts/bench_bf16_updates.py --steps 50 --lr 1e-6
"""

from __future__ import annotations

import argparse
from typing import Any, NamedTuple

import torch

from gspo_trl.model.tiny.dense import TinyModelSpec, build_tiny_model, default_corpus, train_tokenizer

MODES = {
    "pure bf16 weights": torch.bfloat16,
    "fp32 weights + bf16 autocast": torch.float32,
}
"""Setting -> dtype the weights (and so AdamW's update) are stored in; the forward is bf16 in both."""


class Result(NamedTuple):
    setting: str
    steps: int
    fraction_changed: float
    """Share of all weight elements (0-1) whose stored value moved."""
    mean_abs_change: float


def measure(setting: str, steps: int, lr: float = 1e-6, seed: int = 0, tokenizer: Any = None) -> Result:
    """Train the tiny model `steps` AdamW steps on one fixed batch in `setting` (a MODES key)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = tokenizer or train_tokenizer(default_corpus())
    model = build_tiny_model(tokenizer, TinyModelSpec(seed=seed)).to(device=device, dtype=MODES[setting])
    initial = [p.detach().clone() for p in model.parameters()]
    generator = torch.Generator().manual_seed(seed)
    batch = torch.randint(0, len(tokenizer), (8, 32), generator=generator).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    for _ in range(steps):
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    changed = total = 0
    abs_change = 0.0
    for before, after in zip(initial, model.parameters(), strict=True):
        delta = (after.detach() - before).float()
        changed += int((delta != 0).sum())
        total += delta.numel()
        abs_change += float(delta.abs().sum())
    return Result(setting, steps, changed / total, abs_change / total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tokenizer = train_tokenizer(default_corpus())  # the slow part (~3 s); shared by both runs
    print(f"{'setting':<30} {'steps':>5} {'weights changed':>16} {'mean |dw|':>11}")
    for setting in MODES:
        result = measure(setting, args.steps, args.lr, args.seed, tokenizer)
        print(
            f"{result.setting:<30} {result.steps:>5} {result.fraction_changed:>15.2%} "
            f"{result.mean_abs_change:>11.2e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
