"""Dynamic sampling against none, at the same number of policy updates (issue 32's experiment).

The demo's setup (its tiny model, warm-started by the demo's cached SFT, then the tiny reversal
recipe) on two tasks: `demo`, the demo's digit strings (4-7 digits), and `long`, 6-9 digit strings
(8-9 digits the warm start never saw) with an exact-match reward (groups whose 8 answers all
score 0 are common from the start).
For each task and seed, one run with `sampling.dynamic` off and one with it on (order alternated
by seed), each `--steps` optimizer steps; the held-out greedy exact-match accuracy is read every
`--every` steps. Prints one line per run and a markdown table (mean over seeds) of held-out
accuracy against updates, with each run's generated tokens (perf/generated_tokens summed) and
wall time; writes everything to OUT/results.json.

    python scripts/bench_dynamic_sampling.py [--seeds 0 1 2] [--steps 200] [--every 50] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

TASKS = {
    "demo": (4, 7, "gspo_trl.data.synthetic:digit_reversal_reward"),
    "long": (6, 9, "gspo_trl.data.synthetic:exact_match"),
}
"""Each task's digit-string lengths (min, max) and training reward. `demo` is the demo's (partial
credit per position); `long` adds 8-9 digit strings the warm start never saw and rewards only an
exact answer, so most groups score 0 on every response early on."""


def task_data(out: Path, task: str, rows: int) -> Path:
    """The task's rows as a JSON-lines file (seed 0, like `synthetic:reversal`)."""
    from gspo_trl.data.synthetic import ReversalTask, make_rl_rows

    low, high, _ = TASKS[task]
    path = out / f"data-{task}.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for row in make_rl_rows(rows, seed=0, task=ReversalTask(min_digits=low, max_digits=high)):
            handle.write(json.dumps(row) + "\n")
    return path


def warm_model(out: Path, sft_steps: int) -> Path:
    """The demo's tiny model after the demo's warm start (cached under OUT)."""
    from gspo_trl.data.synthetic import ReversalTask
    from gspo_trl.demo.pipeline import DEMO_MODEL
    from gspo_trl.demo.warm_start import WarmStartSettings, warm_start
    from gspo_trl.model.tiny.dense import save_tiny_model

    base = save_tiny_model(out / "tiny-model", DEMO_MODEL)
    return warm_start(base, out / "warm-start", ReversalTask(), WarmStartSettings(steps=sft_steps))


def one_run(args: argparse.Namespace, model: Path, data: Path, seed: int, dynamic: bool, name: str) -> dict:
    """One GSPO run of the tiny recipe; its held-out curve, generated tokens and wall time."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.config.shipped import RECIPES_DIR
    from gspo_trl.training.build import train_recipe
    from gspo_trl.training.heldout.scoring import HeldoutCallback

    overrides: dict[str, Any] = {
        "model.name_or_path": str(model),
        "data.path": str(data),
        "rewards": [TASKS[args.task][2]],
        "data.num_rows": args.rows,
        "data.eval_size": args.heldout_rows,
        "output_dir": str(args.out / name),
        "seed": seed,
        "max_steps": args.steps,
        "logging_steps": 1,  # every rollout's perf/generated_tokens in the logs
        "heldout.every_steps": args.every,
        "heldout.max_rows": args.heldout_rows,
        "heldout.k": [],
        "sampling": {"dynamic": dynamic, "max_rounds": args.max_rounds},
    }
    recipe = load_recipe(RECIPES_DIR / "tiny" / "reversal.yaml", overrides)
    started = time.perf_counter()
    trainer = train_recipe(recipe, overwrite=True)
    wall = time.perf_counter() - started
    heldout = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback))
    logs = trainer.state.log_history
    generated = sum(e.get("perf/generated_tokens", 0.0) for e in logs)
    zero = [e["gspo/zero_variance_groups"] for e in logs if "gspo/zero_variance_groups" in e]
    kept = [e["gspo/dynamic/keep_rate"] for e in logs if "gspo/dynamic/keep_rate" in e]

    def tokens_by(step: int) -> float:  # generated tokens, every round, up to this evaluation
        return sum(e.get("perf/generated_tokens", 0.0) for e in logs if e.get("step", 0) <= step)

    return {
        "heldout": [[step, score] for step, score in heldout.history],
        "tokens_at_heldout": [tokens_by(step) for step, _ in heldout.history],
        "generated_tokens": generated,
        "wall_s": wall,
        "zero_variance_first": zero[0] if zero else None,
        "zero_variance_mean": statistics.mean(zero) if zero else None,
        "keep_rate_mean": statistics.mean(kept) if kept else None,
    }


def table(results: dict[str, dict[str, list[dict]]]) -> str:
    """Markdown: per task and mode, mean held-out accuracy at each evaluation, tokens, wall time."""
    lines = []
    for task, modes in results.items():
        steps = [step for step, _ in next(iter(modes.values()))[0]["heldout"]]
        lines.append(f"\n**{task}** (held-out greedy exact match, mean over {len(modes['off'])} seeds)\n")
        header = ["dynamic", *(f"step {s}" for s in steps), "generated tokens", "wall s", "zero-var"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for mode, runs in modes.items():
            scores = [statistics.mean(r["heldout"][i][1] for r in runs) for i in range(len(steps))]
            tokens = statistics.mean(r["generated_tokens"] for r in runs)
            wall = statistics.mean(r["wall_s"] for r in runs)
            zero = statistics.mean(r["zero_variance_mean"] or 0.0 for r in runs)
            cells = [mode, *(f"{s:.3f}" for s in scores), f"{tokens:,.0f}", f"{wall:.0f}", f"{zero:.0%}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("\nthousands of generated tokens spent by each evaluation (mean over seeds)\n")
        lines.append("| dynamic | " + " | ".join(f"step {s}" for s in steps) + " |")
        lines.append("|" + "---|" * (len(steps) + 1))
        for mode, runs in modes.items():
            spent = [
                statistics.mean(r["tokens_at_heldout"][i] for r in runs) / 1000 for i in range(len(steps))
            ]
            lines.append("| " + " | ".join([mode, *(f"{t:.1f}" for t in spent)]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps (policy updates) per run")
    parser.add_argument("--every", type=int, default=50, help="held-out evaluation every N steps")
    parser.add_argument("--max-rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--heldout-rows", type=int, default=100)
    parser.add_argument("--sft-steps", type=int, default=800, help="the warm start's steps (the demo's)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-dynamic"))
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: the tiny model gains nothing from more)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(args.threads)
    model = warm_model(args.out, args.sft_steps)
    results: dict[str, dict[str, list[dict]]] = {}
    for task in args.tasks:
        data = task_data(args.out, task, args.rows + args.heldout_rows)
        args.task = task
        if args.warmup:  # one short unrecorded run: the first run of a process pays for imports
            one_run(
                argparse.Namespace(**{**vars(args), "steps": 2, "every": 2}), model, data, 0, True, "warmup"
            )
        results[task] = {"off": [], "on": []}
        for index, seed in enumerate(args.seeds):
            order = (False, True) if index % 2 == 0 else (True, False)
            for dynamic in order:
                mode = "on" if dynamic else "off"
                run = one_run(args, model, data, seed, dynamic, f"{task}-{mode}-seed{seed}")
                results[task][mode].append(run)
                curve = " ".join(f"{step}:{score:.3f}" for step, score in run["heldout"])
                print(
                    f"{task} dynamic={mode} seed={seed} held-out {curve} | "
                    f"{run['generated_tokens']:,.0f} tokens | {run['wall_s']:.0f} s",
                    flush=True,
                )
    text = table(results)
    print(text)
    (args.out / "results.json").write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "results": results}, indent=2)
    )
    return results


if __name__ == "__main__":
    main()
