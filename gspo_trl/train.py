"""Entry point: `accelerate launch -m gspo_trl.train --config RECIPE.yaml [--key value ...]`.

The shortest path from a recipe to a trained model, readable top to bottom:
load + validate the recipe (no model loaded yet) -> build rewards -> load data and check the
columns the rewards need -> GRPOConfig with GSPO defaults -> GSPOTrainer -> train (resuming
from the last checkpoint with --resume) -> save the model and trainer_state.json.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import rewards
from gspo_trl.data import DataError, load_data
from gspo_trl.diagnostics import DiagnosticsConfig
from gspo_trl.heldout import HeldoutCallback
from gspo_trl.model import (
    ModelConfigError,
    load_tokenizer,
    lora_config,
    model_init_kwargs,
    resolve_model_path,
)
from gspo_trl.recipe import Recipe, RecipeError, load_recipe, recipe_as_yaml
from gspo_trl.typed_fields import build_dataclass
from gspo_trl.validation import check_columns, required_columns, validate

logger = logging.getLogger("gspo_trl")

RESOLVED_RECIPE = "recipe.yaml"
"""Written into output_dir before training: the recipe with defaults and overrides applied."""

USER_ERRORS = (
    RecipeError,
    DataError,
    ModelConfigError,
    rewards.UnknownRewardError,
    rewards.RewardParameterError,
)
"""Errors caused by the user's input: reported in one line, without a traceback."""


def _on_cpu_only() -> bool:
    import torch

    return not torch.cuda.is_available()


def grpo_config(recipe: Recipe) -> Any:
    """TRL's GRPOConfig for the recipe: GSPO defaults, the recipe's keys, the rewards' weights."""
    from trl import GRPOConfig

    training = dict(recipe.training)
    training.setdefault(
        "output_dir", str(Path("runs") / Path(recipe.source).stem.replace("<defaults>", "default"))
    )
    training["reward_weights"] = [entry.weight for entry in recipe.rewards]
    training["model_init_kwargs"] = {
        **model_init_kwargs(recipe.model),
        **(training.get("model_init_kwargs") or {}),
    }
    if _on_cpu_only() and "use_cpu" not in recipe.explicit_keys:
        training["use_cpu"] = True
        if "bf16" not in recipe.explicit_keys:
            training["bf16"] = False  # bf16 autocast on CPU is slow and not what a CPU run wants
    return GRPOConfig(**training)


def build_trainer(recipe: Recipe) -> Any:
    """A ready GSPOTrainer for `recipe`; raises a USER_ERRORS exception for bad input."""
    from gspo_trl.trainer import GSPOTrainer

    validate(recipe)
    reward_funcs = [rewards.get(entry.spec, **entry.params) for entry in recipe.rewards]
    train_dataset, eval_dataset = load_data(recipe.data)
    check_columns(recipe, train_dataset.column_names)
    missing = required_columns(recipe) - set(train_dataset.column_names)
    if missing:
        raise RecipeError(f"heldout.reward needs dataset column(s) {sorted(missing)}")

    args = grpo_config(recipe)
    model_path = resolve_model_path(recipe.model, args.output_dir)
    tokenizer = load_tokenizer(recipe.model, model_path)
    if args.use_vllm:
        from gspo_trl.vllm_cpu import patch_trl_for_vllm_cpu

        patch_trl_for_vllm_cpu()

    trainer = GSPOTrainer(
        model=model_path,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset if args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        peft_config=lora_config(recipe.model),
        gspo_token=recipe.algorithm == "gspo_token",
        diagnostics=build_dataclass(DiagnosticsConfig, recipe.diagnostics, "diagnostics"),
    )
    if recipe.heldout is not None:
        if eval_dataset is None:
            raise RecipeError("heldout: needs an eval split; set data.eval_split or data.eval_size")
        grader_spec = recipe.heldout.reward or recipe.rewards[0].spec
        grader_params = {} if recipe.heldout.reward else recipe.rewards[0].params
        trainer.add_callback(
            HeldoutCallback(
                trainer,
                eval_dataset,
                rewards.get(grader_spec, **grader_params),
                every_steps=recipe.heldout.every_steps,
                max_rows=recipe.heldout.max_rows,
                temperature=recipe.heldout.temperature,
                max_new_tokens=args.max_completion_length,
                ks=recipe.heldout.k,
                num_samples=recipe.heldout.num_samples,
                sample_temperature=recipe.heldout.sample_temperature,
                pass_threshold=recipe.heldout.pass_threshold,
            )
        )
    return trainer


def last_checkpoint(output_dir: str) -> str | None:
    """The newest *complete* `checkpoint-N` directory in `output_dir`, or None.

    Trainer writes a checkpoint in place and its trainer_state.json last, so a run killed
    while saving leaves a newer directory without it; resuming from that would fail or load
    half a state. Such directories are skipped (with a warning): at most the steps since the
    previous checkpoint are lost.
    """
    directory = Path(output_dir)
    if not directory.is_dir():
        return None
    numbered = [p for p in directory.glob("checkpoint-*") if p.is_dir() and p.name[11:].isdigit()]
    for checkpoint in sorted(numbered, key=lambda p: int(p.name[11:]), reverse=True):
        if (checkpoint / "trainer_state.json").is_file():
            return str(checkpoint)
        logger.warning("--resume: skipping %s, incomplete (no trainer_state.json)", checkpoint)
    return None


def run(recipe: Recipe, resume: bool = False) -> Any:
    """Train `recipe` to the end and save; returns the trainer (its state holds the logs)."""
    trainer = build_trainer(recipe)
    checkpoint = last_checkpoint(trainer.args.output_dir) if resume else None
    if resume and checkpoint is None:
        logger.warning("--resume: no checkpoint in %s; starting from scratch", trainer.args.output_dir)
    if trainer.accelerator.is_main_process:
        Path(trainer.args.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(trainer.args.output_dir) / RESOLVED_RECIPE).write_text(recipe_as_yaml(recipe), encoding="utf-8")
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(trainer.args.output_dir)
    trainer.save_state()
    return trainer


def split_argv(argv: Sequence[str]) -> tuple[str | None, bool, list[str]]:
    """(recipe, resume flag, overrides) from `[RECIPE | --config RECIPE] [--resume] [--key value ...]`."""
    args = list(argv)
    path, resume = None, False
    if "--resume" in args:
        args.remove("--resume")
        resume = True
    for index, token in enumerate(args):
        if token == "--config" or token.startswith("--config="):
            if token == "--config":
                if index + 1 >= len(args):
                    raise RecipeError("--config: missing the recipe path")
                path = args[index + 1]
                del args[index : index + 2]
            else:
                path = token.split("=", 1)[1]
                del args[index]
            break
    if path is None and args and not args[0].startswith("--"):
        path = args.pop(0)
    return path, resume, args


def main(argv: Sequence[str] | None = None) -> int:
    """Run a recipe; user errors print one line on stderr and return 2."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    try:
        path, resume, overrides = split_argv(argv)
        if path is None:
            raise RecipeError("no recipe given: gspo-trl train RECIPE.yaml (or --config RECIPE.yaml)")
        run(load_recipe(path, overrides), resume=resume)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
