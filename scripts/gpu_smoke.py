"""GPU smoke test: real GSPO on one GPU, measured memory and step time beside `gspo-trl plan`'s.

    python scripts/gpu_smoke.py [--steps 8] [--output-dir runs/gpu-smoke]   # one CUDA GPU
    python scripts/gpu_smoke.py --dry-run                                    # CPU, tiny, 1 step

No hub access: the model is Qwen3-0.6B's decoder shape (its shipped config in
gspo_trl/plan/model_configs: 28 layers, hidden 1024, 16 / 8 heads of 128, MLP 3072) built locally
at random init with the tiny model's locally trained tokenizer and its vocabulary
(gspo_trl.model.tiny.dense), 0.44B parameters. The task is the synthetic digit reversal
(gspo_trl.data.synthetic); generation never stops early (scripts/gpu_common.run_overrides), so
every completion runs to max_completion_length and the measured step is the planned worst case.

Three runs with the same settings (bf16, gradient checkpointing, transformers generate, GSPO's
4 updates per rollout batch): GSPOTrainer full fine-tuning, GSPOTrainer LoRA (r 16, all linear
layers), and TRL's plain GRPOTrainer full fine-tuning, so GSPOTrainer's own cost (diagnostics)
shows as a step-time ratio. Each run prints torch.cuda.max_memory_allocated beside the plan's
peak (its CUDA-context estimate left out: the allocator does not see the context), and the
mean step time over the last full rollout batch (one generation + 4 updates).

`--dry-run` runs the same code on the tiny model on CPU for 1 step without touching CUDA, so
the CPU tests check the wiring; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_common import (  # a sibling module: scripts/ is no package
    build_model,
    cuda_missing,
    decoder_fields,
    longest_prompt,
    one_gpu_parser,
    plan_run,
    run_overrides,
    shipped_config,
)

MODEL = "Qwen/Qwen3-0.6B"
"""Whose decoder the model has (with the tiny tokenizer's vocabulary, hence 0.44B parameters)."""
CONTEXT_TERM = "CUDA context"


@dataclass(frozen=True)
class Run:
    name: str
    trainer: str  # GSPOTrainer | GRPOTrainer
    lora: bool


RUNS = (
    Run("GSPO full fine-tuning", "GSPOTrainer", lora=False),
    Run("GSPO LoRA r16 all-linear", "GSPOTrainer", lora=True),
    Run("GRPOTrainer full fine-tuning", "GRPOTrainer", lora=False),
)
LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}


class StepTimer:
    """Wall time of each optimizer step (on_step_begin -> on_step_end), synchronised on GPU."""

    def __init__(self, cuda: bool) -> None:
        from transformers import TrainerCallback

        timer = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                timer._sync()
                timer.started = time.perf_counter()

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                timer._sync()
                timer.seconds.append(time.perf_counter() - timer.started)

        self.cuda, self.started, self.seconds = cuda, 0.0, []
        self.callback = Callback()

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()


def local_model(output_dir: Path, dry_run: bool) -> Path:
    """The local model: tiny for --dry-run, else Qwen3-0.6B's decoder with the tiny tokenizer."""
    from gspo_trl.model.tiny.dense import TinyModelSpec

    if dry_run:
        return build_model(output_dir, "tiny", TinyModelSpec(), dry_run)
    spec = TinyModelSpec(**decoder_fields(shipped_config(MODEL)), max_position_embeddings=2048)
    return build_model(output_dir, "qwen3-0.6b-decoder", spec, dry_run)


def recipe_overrides(model_dir: Path, run: Run, args: argparse.Namespace, output_dir: Path) -> dict[str, Any]:
    """Recipe keys of one run: the same settings for every run, LoRA aside."""
    overrides = run_overrides(model_dir, args, output_dir / run.name.replace(" ", "-"))
    if run.lora:
        overrides["model"]["lora"] = dict(LORA)
    return overrides


def make_trainer(recipe: Any, trainer_name: str) -> Any:
    """GSPOTrainer via gspo_trl's own builder; GRPOTrainer from the very same pieces."""
    from gspo_trl.training.build import build_trainer

    trainer = build_trainer(recipe)
    if trainer_name == "GSPOTrainer":
        return trainer
    from trl import GRPOTrainer

    return GRPOTrainer(
        model=trainer.model,
        reward_funcs=trainer.reward_funcs,
        args=trainer.args,
        train_dataset=trainer.train_dataset,
        processing_class=trainer.processing_class,
    )


def planned(recipe: Any, model_dir: Path, prompt: int) -> tuple[int, dict[str, int]]:
    """The plan's peak for this run on one GPU, without its CUDA-context estimate, and its terms."""
    result = plan_run(recipe, model_dir, prompt)
    terms = {t.name: t.bytes for t in result.terms if not t.name.startswith(CONTEXT_TERM)}
    context = sum(t.bytes for t in result.terms if t.name.startswith(CONTEXT_TERM))
    return result.verdict.peak_bytes - context, terms


def one_run(run: Run, model_dir: Path, args: argparse.Namespace, output_dir: Path) -> dict[str, Any]:
    from gspo_trl.config.recipe import load_recipe

    cuda = not args.dry_run
    recipe = load_recipe(None, recipe_overrides(model_dir, run, args, output_dir))
    if cuda:
        import torch

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer = make_trainer(recipe, run.trainer)
    timer = StepTimer(cuda)
    trainer.add_callback(timer.callback)
    trainer.train()
    measured = None
    if cuda:
        import torch

        measured = torch.cuda.max_memory_allocated()
    prompt = longest_prompt(trainer)
    predicted, terms = planned(recipe, model_dir, prompt)
    steps_per_generation = int(trainer.args.steps_per_generation)
    last_batch = timer.seconds[-steps_per_generation:] if len(timer.seconds) > steps_per_generation else []
    del trainer
    gc.collect()
    return {
        "run": run.name,
        "trainer": run.trainer,
        "measured_peak_bytes": measured,
        "planned_peak_bytes": predicted,
        "planned_terms": terms,
        "max_prompt_tokens": prompt,
        "step_seconds": timer.seconds,
        "last_rollout_batch_mean_step_seconds": statistics.mean(last_batch) if last_batch else None,
    }


def report(results: list[dict[str, Any]]) -> str:
    """One line per run, then the GSPOTrainer / GRPOTrainer step-time ratio."""
    lines = [f"{'run':30s} {'measured GiB':>12s} {'plan GiB':>9s} {'ratio':>6s} {'step s':>7s}"]
    for row in results:
        measured, plan_bytes = row["measured_peak_bytes"], row["planned_peak_bytes"]
        ratio = f"{measured / plan_bytes:6.2f}" if measured else f"{'n/a':>6s}"
        shown = f"{measured / 2**30:12.2f}" if measured else f"{'n/a (dry)':>12s}"
        step = row["last_rollout_batch_mean_step_seconds"] or statistics.mean(row["step_seconds"])
        lines.append(f"{row['run']:30s} {shown} {plan_bytes / 2**30:9.2f} {ratio} {step:7.2f}")
    gspo = next(r for r in results if r["trainer"] == "GSPOTrainer" and "LoRA" not in r["run"])
    grpo = next(r for r in results if r["trainer"] == "GRPOTrainer")

    def step(row: dict[str, Any]) -> float:
        return row["last_rollout_batch_mean_step_seconds"] or statistics.mean(row["step_seconds"])

    lines.append(f"GSPOTrainer / GRPOTrainer step time (same settings): {step(gspo) / step(grpo):.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = one_gpu_parser(__doc__, "runs/gpu-smoke", "tiny model, CPU, 1 step, no CUDA calls")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (2 rollout batches)")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.steps, args.completion, args.batch = 1, min(args.completion, 8), 2
    elif cuda_missing("gpu_smoke"):
        return 2
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model_dir = local_model(output_dir, args.dry_run)
    results = [one_run(run, model_dir, args, output_dir) for run in RUNS]
    (output_dir / "gpu_smoke.json").write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
