"""`gspo-trl demo` (what `make demo` runs): GSPO that visibly learns, on 2 CPU cores, no hub.

1. build a tiny Qwen3 model (DEMO_MODEL, below) and tokenizer locally (gspo_trl.model.tiny.dense);
2. warm-start it with a short SFT on imperfect data (gspo_trl.demo.warm_start), reused
   from OUTPUT_DIR/warm-start when a previous run made it from the same inputs;
3. train it with GSPO through the same path as `gspo-trl train recipes/tiny/reversal.yaml`,
   scoring held-out exact-match accuracy (greedy) before and after;
4. save the model, `results.json`, the held-out rows, and a PNG of the reward curve.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gspo_trl.config.recipe import load_recipe, parse_overrides
from gspo_trl.config.shipped import RECIPES_DIR
from gspo_trl.core.cpu_threads import size_torch_threads
from gspo_trl.core.metric_names import heldout_pass_at
from gspo_trl.data.synthetic import ReversalTask
from gspo_trl.demo.warm_start import WarmStartSettings, warm_start
from gspo_trl.model.tiny.dense import TinyModelSpec, save_tiny_model
from gspo_trl.training.build import train_recipe
from gspo_trl.training.heldout.scoring import HeldoutCallback

DEFAULT_RECIPE = RECIPES_DIR / "tiny" / "reversal.yaml"
DEMO_MODEL = TinyModelSpec(num_hidden_layers=2, intermediate_size=192, initializer_range=0.03)
"""The demo's tiny model: TinyModelSpec's default with 2 layers instead of 3, an MLP of 192
instead of 384, and weights drawn at std 0.03 instead of Qwen3's 0.02 (at 0.006 the warm start
never left a loss of 1.7; at 0.05 it learnt faster than at 0.02). An SFT step costs ~0.055 s of
CPU against ~0.087 s for the default shape (2 alternating pairs, 1 thread, load 2.5-3), and it
learns this task at least as fast per step (300-step warm starts: loss 0.14 against 0.17)."""
DEFAULT_SFT_STEPS = WarmStartSettings().steps
logger = logging.getLogger(__name__)


def _heldout_callback(trainer: Any) -> HeldoutCallback:
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, HeldoutCallback):
            return callback
    raise RuntimeError("the demo recipe must have a heldout: section")


def stage(number: int, title: str) -> None:
    """A stage header of the demo's output: where the time goes, in the order it goes."""
    print(f"\n== {number}/4 {title}", flush=True)


def run_demo(
    output_dir: Path, recipe_path: Path, sft_steps: int, overrides: Sequence[str] = ()
) -> dict[str, Any]:
    """Run the whole demo into `output_dir`; returns (and writes) the results."""
    started = time.time()
    task = ReversalTask()
    stage(1, f"model: the tiny Qwen3 (built locally, no hub) in {output_dir / 'tiny-model'}")
    print(size_torch_threads(), flush=True)
    base = save_tiny_model(output_dir / "tiny-model", DEMO_MODEL)
    stage(2, f"warm start: {sft_steps} steps of SFT on imperfect answers (cached between runs)")
    warm = warm_start(base, output_dir / "warm-start", task, WarmStartSettings(steps=sft_steps))
    warm_seconds = time.time() - started

    recipe = load_recipe(
        recipe_path,
        {"model.name_or_path": str(warm), "output_dir": str(output_dir / "gspo"), **_as_dict(overrides)},
    )
    stage(3, f"GSPO: {recipe.source}, {recipe.training.get('max_steps')} steps, held-out score as it goes")
    # The demo owns OUTPUT_DIR/gspo: each `make demo` starts it again.
    trainer = train_recipe(recipe, overwrite=True)
    stage(4, "evaluation: held-out accuracy before and after, results.json, reward curve")
    history = _heldout_callback(trainer).history
    (step_before, before), (step_after, after) = history[0], history[-1]

    eval_dataset = _heldout_callback(trainer).dataset
    with (output_dir / "heldout.jsonl").open("w", encoding="utf-8") as handle:
        for row in eval_dataset:
            handle.write(json.dumps(row) + "\n")

    rewards_logged = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    sampled = {
        key: [entry[key] for entry in trainer.state.log_history if key in entry]
        for key in (heldout_pass_at(1), heldout_pass_at(4))
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
        "reward_curve": str(_plot_reward_curve(trainer.state.log_history, output_dir / "reward_curve.png")),
    }
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


def _plot_reward_curve(log_history: list[dict[str, Any]], path: Path) -> Path:
    """The report's reward plot (training reward, held-out scores), saved as the demo's curve."""
    from gspo_trl.diagnose.report import plot_reward

    plot_reward([entry for entry in log_history if "step" in entry], path)
    return path


def _as_dict(overrides: Sequence[str]) -> dict[str, Any]:
    return parse_overrides(list(overrides))
