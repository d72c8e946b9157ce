"""Packed vs padded log-prob forwards (`packing: true`) on a length-skewed task, on CPU.

    python scripts/bench_packing.py [--quick] [--tasks dense moe] [--seeds 0 1 2] [--steps 16]

The task: GSPO on the tiny dense model or the tiny Qwen3-MoE (8 experts, top-2), prompts of
4-25 words, completions *sampled by the policy* (HF generate, temperature 1) and cut at a
length drawn per (prompt, sample, seed) from a log-normal clipped to [5, MAX_LEN] tokens
(median ~25, a tail to MAX_LEN): the long-tailed lengths of RL rollouts, without waiting for a
tiny model to learn to stop. Reward: the share of digits in the completion's text (the policy
learns to favour digit tokens). Each (task, seed) trains both arms on the same seeded rollouts,
padded then packed, alternating, in this process with one torch thread.

Per run: seconds per update (perf/update_s over the updates) and per pi_old pass
(perf/old_logprobs_s over the rollout batches), the tokens each forwards (padded: rows x the
rollout batch's width, TRL's rectangle; packed: x perf/packed_fraction), and the held-out
reward after the same updates (64 sampled completions of 16 unseen prompts, seeded). The table:
medians over seeds and the ratio packed / padded; `--quick` (dense, one seed, 8 updates) prints
`update time packed / padded: R`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAX_LEN = 224
"""The longest completion; the log-normal's tail reaches it in ~1 row in 30."""
PROMPTS = [("the " * (i % 8) * 3) + f"add {i} and {i + 3}" for i in range(256)]
HELD_OUT = [f"sum {i} plus {2 * i}" for i in range(16)]
DEMO_RECIPE = ROOT / "gspo_trl" / "recipes" / "tiny" / "reversal.yaml"


def completion_length(prompt: str, index: int, seed: int) -> int:
    """Tokens kept of a sampled completion: log-normal (median 25), clipped to [5, MAX_LEN]."""
    rng = random.Random(f"{seed}|{prompt}|{index}")
    return int(min(MAX_LEN, max(5, rng.lognormvariate(3.2, 1.0))))


def skewed_rollout(seed: int):
    """A TRL `rollout_func`: the policy samples, each completion is cut at its drawn length."""

    def rollout(prompts: list, trainer) -> dict:
        tokenizer, model = trainer.processing_class, trainer.model
        prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        lengths, seen = [], {}
        for prompt in prompts:
            lengths.append(completion_length(prompt, seen.get(prompt, 0), seed))
            seen[prompt] = seen.get(prompt, 0) + 1
        completions = sample(model, tokenizer, prompt_ids, max(lengths))
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": [c[:n] for c, n in zip(completions, lengths, strict=True)],
            "logprobs": None,
        }

    return rollout


@torch.no_grad()
def sample(model, tokenizer, prompt_ids: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Temperature-1 samples of `new_tokens` tokens, EOS suppressed (lengths are drawn instead)."""
    width = max(map(len, prompt_ids))
    pad = tokenizer.pad_token_id or 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
    was_training = model.training
    model.eval()
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=pad,
    )
    model.train(was_training)
    return out[:, width:].tolist()


def digit_share(completions: list[str], **_: object) -> list[float]:
    """Share (0-1) of a completion's non-space characters that are digits."""
    out = []
    for text in completions:
        chars = [c for c in text if not c.isspace()]
        out.append(sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0)
    return out


def held_out_reward(model, tokenizer, seed: int) -> float:
    torch.manual_seed(10_000 + seed)
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in HELD_OUT for _ in range(4)]
    completions = sample(model, tokenizer, prompts, 24)
    return statistics.fmean(digit_share(tokenizer.batch_decode(completions, skip_special_tokens=True)))


def model_dir(task: str, root: Path) -> Path:
    from gspo_trl.model.tiny.dense import save_tiny_model
    from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe

    path = root / task
    if not (path / "config.json").exists():
        if task == "dense":
            save_tiny_model(path)
        else:
            save_tiny_moe(path, TinyMoeSpec(num_hidden_layers=2, hidden_size=64, num_attention_heads=2))
    return path


def train(task: str, seed: int, packing: bool, steps: int, root: Path) -> dict:
    """One seeded GSPO run; its timings, tokens and held-out reward."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.trainer import GSPOTrainer

    path = model_dir(task, root)
    widths: list[int] = []
    rollout = skewed_rollout(seed)

    def recorded(prompts: list, trainer) -> dict:
        out = rollout(prompts, trainer)
        widths.append(max(map(len, out["prompt_ids"])) + max(map(len, out["completion_ids"])))
        return out

    config = GSPOConfig(
        output_dir=str(root / f"run-{task}-{seed}-{int(packing)}"),
        use_cpu=True,
        report_to="none",
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=MAX_LEN,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        learning_rate=1e-3,
        epsilon=0.02,
        epsilon_high=0.027,
        seed=seed,
        dataloader_num_workers=0,
        packing=packing,
    )
    trainer = GSPOTrainer(
        model=str(path),
        processing_class=AutoTokenizer.from_pretrained(path),
        reward_funcs=[digit_share],
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        rollout_func=recorded,
    )
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    logs = trainer.state.log_history
    update_s = sum(e.get("perf/update_s", 0.0) for e in logs)
    old_s = sum(e.get("perf/old_logprobs_s", 0.0) for e in logs)
    fractions = [e["perf/packed_fraction"] for e in logs if "perf/packed_fraction" in e]
    rows = config.per_device_train_batch_size * config.steps_per_generation
    padded_tokens = statistics.fmean(widths) * config.per_device_train_batch_size
    return {
        "task": task,
        "seed": seed,
        "arm": "packed" if packing else "padded",
        "update_s": update_s / steps,
        "old_logprobs_s": old_s / max(len(widths), 1),
        "token_fraction": statistics.fmean(fractions) if fractions else 1.0,
        "tokens_per_update": padded_tokens * (statistics.fmean(fractions) if fractions else 1.0),
        "rollout_rows": rows,
        "held_out": held_out_reward(trainer.model, trainer.processing_class, seed),
        "wall_s": wall,
    }


def demo_model(root: Path) -> Path:
    """The demo's model: DEMO_MODEL warm-started on digit reversal as `make demo` does (cached)."""
    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.pipeline import DEMO_MODEL
    from gspo_trl.demo.warm_start import WarmStartSettings, warm_start
    from gspo_trl.model.tiny.dense import save_tiny_model

    base = root / "demo-tiny"
    if not (base / "config.json").exists():
        save_tiny_model(base, DEMO_MODEL)
    return warm_start(base, root / "demo-warm", ReversalTask(), WarmStartSettings())


def train_demo(seed: int, packing: bool, steps: int, root: Path) -> dict:
    """The demo's recipe (recipes/tiny/reversal.yaml: answers of 5-8 tokens, HF generate) on its
    warm-started model: what packing does where there is little padding to leave out."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer

    overrides = {
        "model.name_or_path": str(demo_model(root)),
        "seed": seed,
        "max_steps": steps,
        "logging_steps": 4,
        "heldout.every_steps": 0,
        "heldout.k": [],
        "heldout.max_rows": 64,
        "packing": packing,
        "output_dir": str(root / f"run-demo-{seed}-{int(packing)}"),
    }
    trainer = build_trainer(load_recipe(DEMO_RECIPE, overrides))
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    logs = trainer.state.log_history
    scores = [e["heldout/score"] for e in logs if "heldout/score" in e]
    fractions = [e["perf/packed_fraction"] for e in logs if "perf/packed_fraction" in e]
    rollouts = steps // trainer.args.steps_per_generation
    return {
        "task": "demo",
        "seed": seed,
        "arm": "packed" if packing else "padded",
        "update_s": sum(e.get("perf/update_s", 0.0) for e in logs) / steps,
        "old_logprobs_s": sum(e.get("perf/old_logprobs_s", 0.0) for e in logs) / max(rollouts, 1),
        "token_fraction": statistics.fmean(fractions) if fractions else 1.0,
        "tokens_per_update": float("nan"),  # the recipe's rollouts are TRL's own: not recorded here
        "held_out": scores[-1] if scores else float("nan"),
        "wall_s": wall,
    }


FIGURES = ("token_fraction", "tokens_per_update", "update_s", "old_logprobs_s", "held_out")
"""The per-run figures the table takes medians of over seeds."""


def table(runs: list[dict]) -> str:
    """Medians over seeds per (task, arm), and packed / padded."""
    lines = [
        "| task | arm | tokens / update | s / update | s / pi_old pass | held-out (median, per seed) |",
        "|---|---|---|---|---|---|",
    ]
    ratios = {}
    for task in dict.fromkeys(r["task"] for r in runs):
        medians = {}
        for arm in ("padded", "packed"):
            mine = [r for r in runs if r["task"] == task and r["arm"] == arm]
            if not mine:
                continue
            med = {k: statistics.median(r[k] for r in mine) for k in FIGURES}
            medians[arm] = med
            seeds = ", ".join(f"{r['held_out']:.3f}" for r in mine)
            tokens = f"{med['tokens_per_update']:,.0f}" if math.isfinite(med["tokens_per_update"]) else ""
            lines.append(
                f"| {task} | {arm} | {tokens} | {med['update_s']:.3f} | "
                f"{med['old_logprobs_s']:.3f} | {med['held_out']:.3f} ({seeds}) |"
            )
        if len(medians) == 2:
            ratios[task] = medians["packed"]["update_s"] / medians["padded"]["update_s"]
            old = medians["packed"]["old_logprobs_s"] / medians["padded"]["old_logprobs_s"]
            tokens = medians["packed"]["token_fraction"]
            lines.append(f"| {task} | packed / padded | {tokens:.2f} | {ratios[task]:.2f} | {old:.2f} | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="dense task, one seed, 8 updates")
    parser.add_argument("--tasks", nargs="+", default=["dense", "moe"], choices=["dense", "moe", "demo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=16, help="optimizer updates per run (4 a rollout batch)")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench_packing"))
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.seeds, args.steps = ["dense"], [0], 8
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(1)
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    print(f"load before: {os.getloadavg()[0]:.1f} (1-min average, {os.cpu_count()} cores), 1 torch thread")
    runs = []
    for task in args.tasks:
        for seed in args.seeds:
            for packing in (False, True):  # alternating, same seed: the same rollouts
                if task == "demo":
                    run = train_demo(seed, packing, args.steps, root)
                else:
                    run = train(task, seed, packing, args.steps, root)
                runs.append(run)
                print(json.dumps(run), flush=True)
                with (root / "runs.jsonl").open("a") as log:
                    log.write(json.dumps(run) + "\n")
    print(f"load after: {os.getloadavg()[0]:.1f}")
    print(table(runs))
    first = args.tasks[0]
    padded = statistics.median(r["update_s"] for r in runs if r["task"] == first and r["arm"] == "padded")
    packed = statistics.median(r["update_s"] for r in runs if r["task"] == first and r["arm"] == "packed")
    print(f"update time packed / padded: {packed / padded:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
