"""`gspo-trl demo` (what `make demo` runs): GSPO that visibly learns, on 2 CPU cores, no hub.

1. build the tiny Qwen3 model and tokenizer locally (gspo_trl.tiny);
2. warm-start it with a short SFT on imperfect data (gspo_trl.warm_start);
3. train it with GSPO through the same path as `gspo-trl train recipes/tiny/reversal.yaml`,
   scoring held-out exact-match accuracy (greedy) before and after;
4. save the model, `results.json`, the held-out rows, and a PNG of the reward curve.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gspo_trl.heldout import HeldoutCallback
from gspo_trl.recipe import load_recipe
from gspo_trl.synthetic import ReversalTask
from gspo_trl.tiny import save_tiny_model
from gspo_trl.train import run
from gspo_trl.warm_start import warm_start

DEFAULT_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "tiny" / "reversal.yaml"
logger = logging.getLogger(__name__)


def plot_reward_curve(log_history: list[dict[str, Any]], path: Path) -> Path:
    """PNG of the mean training reward per logging step, with the held-out scores marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reward = [(entry["step"], entry["reward"]) for entry in log_history if "reward" in entry]
    heldout = [(entry["step"], entry["heldout/score"]) for entry in log_history if "heldout/score" in entry]
    figure, axis = plt.subplots(figsize=(7, 4), dpi=110)
    if reward:
        axis.plot(*zip(*reward, strict=True), marker=".", label="training reward (partial credit)")
    if heldout:
        axis.plot(*zip(*heldout, strict=True), "s--", label="held-out exact match (greedy)")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("score (0-1)")
    axis.set_ylim(0, 1)
    axis.set_title("GSPO on the tiny CPU model: digit reversal")
    axis.grid(alpha=0.3)
    axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def _heldout_callback(trainer: Any) -> HeldoutCallback:
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, HeldoutCallback):
            return callback
    raise RuntimeError("the demo recipe must have a heldout: section")


def run_demo(
    output_dir: Path, recipe_path: Path, sft_steps: int, overrides: Sequence[str] = ()
) -> dict[str, Any]:
    """Run the whole demo into `output_dir`; returns (and writes) the results."""
    started = time.time()
    task = ReversalTask()
    base = save_tiny_model(output_dir / "tiny-model")
    warm = warm_start(base, output_dir / "warm-start", task, steps=sft_steps)
    warm_seconds = time.time() - started

    recipe = load_recipe(
        recipe_path,
        {"model.name_or_path": str(warm), "output_dir": str(output_dir / "gspo"), **_as_dict(overrides)},
    )
    trainer = run(recipe)
    history = _heldout_callback(trainer).history
    (step_before, before), (step_after, after) = history[0], history[-1]

    eval_dataset = _heldout_callback(trainer).dataset
    with (output_dir / "heldout.jsonl").open("w", encoding="utf-8") as handle:
        for row in eval_dataset:
            handle.write(json.dumps(row) + "\n")

    rewards_logged = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    sampled = {
        key: [entry[key] for entry in trainer.state.log_history if key in entry]
        for key in ("heldout/pass@1", "heldout/pass@4")
    }
    results = {
        "heldout_accuracy_before": before,
        "heldout_accuracy_after": after,
        "heldout_gain": after - before,
        "heldout_rows": len(eval_dataset),
        **{
            f"sampled_{key.split('/')[1]}_{when}": values[index]
            for key, values in sampled.items()
            if values
            for when, index in (("before", 0), ("after", -1))
        },
        "train_reward_first": rewards_logged[0] if rewards_logged else None,
        "train_reward_last": rewards_logged[-1] if rewards_logged else None,
        "gspo_steps": step_after - step_before,
        "warm_start_seconds": round(warm_seconds, 1),
        "total_seconds": round(time.time() - started, 1),
        "model_dir": str(output_dir / "gspo"),
        "reward_curve": str(plot_reward_curve(trainer.state.log_history, output_dir / "reward_curve.png")),
    }
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


def _as_dict(overrides: Sequence[str]) -> dict[str, Any]:
    from gspo_trl.recipe import parse_overrides

    return parse_overrides(list(overrides))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gspo-trl demo", description=__doc__)
    parser.add_argument("--output-dir", type=Path, default=Path("runs/demo"))
    parser.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    parser.add_argument("--sft-steps", type=int, default=1000, help="warm-start SFT steps")
    args, overrides = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results = run_demo(args.output_dir, args.recipe, args.sft_steps, overrides)
    print()
    print("GSPO demo (tiny Qwen3, digit reversal, CPU)")
    print(f"  held-out exact-match accuracy before GSPO: {results['heldout_accuracy_before']:.3f}")
    print(f"  held-out exact-match accuracy after GSPO:  {results['heldout_accuracy_after']:.3f}")
    print(f"  gain: {results['heldout_gain']:+.3f} over {results['heldout_rows']} held-out prompts")
    if "sampled_pass@4_before" in results:
        print(
            "  sampled (temperature 1): pass@1 {:.3f} -> {:.3f}, pass@4 {:.3f} -> {:.3f}".format(
                results["sampled_pass@1_before"],
                results["sampled_pass@1_after"],
                results["sampled_pass@4_before"],
                results["sampled_pass@4_after"],
            )
        )
    print(f"  model: {results['model_dir']}   reward curve: {results['reward_curve']}")
    print(f"  time: {results['total_seconds']:.0f} s (warm start {results['warm_start_seconds']:.0f} s)")
    return 0
