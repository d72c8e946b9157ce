"""From a recipe to a trained model: the GSPO config, the trainer, and the run.

`build_trainer` is everything `gspo-trl train` does before `trainer.train()`: the same
preflight checks `gspo-trl validate` runs (gspo_trl.training.preflight), then the rewards,
the data, `GSPOConfig` and `GSPOTrainer`. `train_recipe` claims the output directory
(gspo_trl.training.safety.run_dir: lock, no silent overwrite, the checkpoint to resume from), trains
and saves the model, the trainer state and the resolved recipe. `gspo-trl train` makes the
same two steps before it imports this module (gspo_trl.train), then calls `train_claimed`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gspo_trl.rewards as rewards
from gspo_trl.config.batch import RolloutBatch
from gspo_trl.config.recipe import Recipe, recipe_as_yaml
from gspo_trl.config.recipe_file import RESOLVED_RECIPE
from gspo_trl.core.cpu_threads import resize_torch_threads
from gspo_trl.model.loading.hub import hub_model_errors
from gspo_trl.model.loading.precision import training_weight_precision
from gspo_trl.model.loading.settings import load_tokenizer, lora_config, model_init_kwargs, resolve_model_path
from gspo_trl.training.engine.vllm_server import check_vllm_server, server_loss_in_one_line
from gspo_trl.training.heldout.scoring import HeldoutSettings
from gspo_trl.training.preflight import PreparedData, check_one_gpu_per_process, output_dir_of, preflight
from gspo_trl.training.probes.base import Probe
from gspo_trl.training.probes.console import ConsoleProbe
from gspo_trl.training.probes.heldout import HeldoutProbe
from gspo_trl.training.probes.resume_warnings import (
    mid_batch_resume_note,
    quiet_tied_weights_warning,
)
from gspo_trl.training.recipe_probes import recipe_probes
from gspo_trl.training.safety.interrupt import TrainingInterrupted
from gspo_trl.training.safety.reward_output_checks import with_reward_checks
from gspo_trl.training.safety.run_dir import RunComplete, claim_run_dir

logger = logging.getLogger("gspo_trl")


def _deepspeed_launch(recipe: Recipe) -> bool:
    """True under `accelerate launch` with a DeepSpeed config (accelerate sets this variable), or
    with TrainingArguments' own `deepspeed` key (the `deepspeed` launcher sets no such variable;
    transformers then builds the DeepSpeed engine from that config itself)."""
    if recipe.training.get("deepspeed"):
        return True
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def _weights_dtype(recipe: Recipe, dtype: Any) -> Any:
    """The dtype to load trainable weights in (gspo_trl.model.loading.precision: bfloat16 becomes
    float32 where nothing keeps fp32 master weights)."""
    precision = training_weight_precision(
        dtype, _deepspeed_launch(recipe), bool(recipe.model.lora), recipe.model.allow_pure_bf16
    )
    if not precision.upcast:
        return dtype
    if _runs_on_cpu(recipe):  # the rule's intended case, with no DeepSpeed to choose: said, not warned
        logger.info("model.dtype bfloat16 is loaded as float32 on CPU (fp32 weights: AdamW's updates kept)")
        return precision.load_dtype
    logger.warning(
        "model.dtype: bfloat16 without DeepSpeed: nothing keeps fp32 master weights, so AdamW would "
        "round most updates away. Loading the weights in float32 and training under bf16 autocast "
        "(bf16: true); set model.allow_pure_bf16: true to keep pure bf16 weights."
    )
    return precision.load_dtype


def gspo_config(recipe: Recipe) -> Any:
    """The GSPOConfig for the recipe: its algorithm's defaults, its keys, the rewards' weights,
    and weights in float32 where a bfloat16 dtype would lose updates (`_weights_dtype`). Unset
    `bf16`/`use_cpu` reach GSPOConfig as unset: it applies the CPU rule (gspo_trl.model.loading.precision)."""
    from gspo_trl.training.config import GSPOConfig

    training = dict(recipe.training)
    training["output_dir"] = output_dir_of(recipe)
    training["reward_weights"] = [entry.weight for entry in recipe.rewards]
    training["model_init_kwargs"] = {
        **model_init_kwargs(recipe.model),
        **(training.get("model_init_kwargs") or {}),
    }
    if "dtype" in training["model_init_kwargs"]:
        init_kwargs = training["model_init_kwargs"]
        init_kwargs["dtype"] = _weights_dtype(recipe, init_kwargs["dtype"])
    return GSPOConfig(
        **training,
        gspo_token=recipe.algorithm == "gspo_token",
        diagnostics=recipe.diagnostics,
        allow_on_policy=recipe.allow_on_policy,
        engine=recipe.engine,
        moe=recipe.moe,
        sampling=recipe.sampling,
        packing=recipe.packing,
    )


def build_trainer(recipe: Recipe, data: PreparedData | None = None, probes: Sequence[Probe] = ()) -> Any:
    """A ready GSPOTrainer for `recipe` (`data`: its preflight's result, when already run; `probes`:
    added after the built-in ones, docs/probes.md); raises a UserError (gspo_trl.core.errors) for bad
    input."""
    from gspo_trl.training.trainer import GSPOTrainer

    data = data if data is not None else preflight(recipe)
    train_dataset, eval_dataset = data.train, data.eval
    reward_funcs = with_reward_checks(
        [rewards.get(entry.spec, **entry.params) for entry in recipe.rewards],
        time_limits_s=[entry.time_limit_s for entry in recipe.rewards],
    )
    args = gspo_config(recipe)
    check_one_gpu_per_process(args.n_gpu, recipe.source, args.model_init_kwargs or {})
    check_vllm_server(args, model=recipe.model.name_or_path)  # before the model loads: fails in seconds
    model_path = resolve_model_path(recipe.model, args.output_dir)
    tokenizer = load_tokenizer(recipe.model, model_path)
    if args.use_vllm:
        from gspo_trl.model.vllm_cpu.gloo_weight_sync import patch_vllm_client_for_gloo
        from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

        if patch_trl_for_vllm_cpu():
            patch_vllm_client_for_gloo()  # server mode against a CPU server: docs/vllm.md

    reporting: list[Probe] = [
        ConsoleProbe(
            recipe.model.name_or_path, [entry.spec for entry in recipe.rewards], len(eval_dataset or ())
        )
    ]
    if recipe.heldout is not None:
        grader_spec = recipe.heldout.reward or recipe.rewards[0].spec
        grader_params = {} if recipe.heldout.reward else recipe.rewards[0].params
        grader = rewards.get(grader_spec, **grader_params)
        reporting.append(HeldoutProbe(eval_dataset, grader, HeldoutSettings.of_recipe(recipe.heldout, args)))
    with hub_model_errors(model_path):  # TRL loads the weights: cached config, missing weights
        trainer = GSPOTrainer(
            model=model_path,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset if args.eval_strategy != "no" else None,
            processing_class=tokenizer,
            peft_config=lora_config(recipe.model),
            probes=[*reporting, *recipe_probes(recipe.probes), *probes],
        )
    return trainer


def train_recipe(
    recipe: Recipe, resume: bool = False, overwrite: bool = False, probes: Sequence[Probe] = ()
) -> Any:
    """Train `recipe` to the end and save; returns the trainer (its state holds the logs), or
    None when `resume` finds the run already complete (it logs so; nothing is written).

    `resume` continues the run in its output_dir from its newest complete checkpoint;
    `overwrite` deletes a previous run's checkpoints and logs there first; without either, an
    output_dir holding a previous run is refused (gspo_trl.training.safety.run_dir).
    Ctrl-C saves a checkpoint at the end of the current step and raises TrainingInterrupted
    (a KeyboardInterrupt: the CLI prints one line and exits 130); a second Ctrl-C aborts.
    """
    data = preflight(recipe)
    try:
        with claim_run_dir(recipe, output_dir_of(recipe), data, resume=resume, overwrite=overwrite) as claim:
            return train_claimed(recipe, data, claim.checkpoint, probes)
    except RunComplete as complete:
        logger.info("%s", complete)
        return None


def _runs_on_cpu(recipe: Recipe) -> bool:
    import torch

    return bool(recipe.training.get("use_cpu")) or not torch.cuda.is_available()


def train_claimed(
    recipe: Recipe, data: PreparedData, checkpoint: Path | None, probes: Sequence[Probe] = ()
) -> Any:
    """`run` past the checks: build, train (from `checkpoint` when given) and save."""
    if _runs_on_cpu(recipe):
        line = resize_torch_threads(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        if line:
            logger.info(line)
    trainer = build_trainer(recipe, data, probes)
    if trainer.accelerator.is_main_process:
        Path(trainer.args.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(trainer.args.output_dir) / RESOLVED_RECIPE).write_text(recipe_as_yaml(recipe), encoding="utf-8")
    if checkpoint is not None:
        from transformers import TrainerState

        step = TrainerState.load_from_json(str(checkpoint / "trainer_state.json")).global_step
        logger.info("resuming from %s (step %s)", checkpoint, step)
        note = mid_batch_resume_note(RolloutBatch.from_grpo_config(trainer.args), step)
        if note is not None:
            logger.info("resuming mid rollout batch: %s", note)
    try:  # Ctrl-C: GSPOTrainer.train saves a checkpoint at the step's end, then raises
        with quiet_tied_weights_warning(trainer.model), server_loss_in_one_line(trainer.args):
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except TrainingInterrupted as stopped:
        if stopped.step is not None:
            logger.warning(
                "Interrupted at step %d; checkpoint %s saved: continue with --resume",
                stopped.step,
                stopped.checkpoint,
            )
        raise
    trainer.save_model(trainer.args.output_dir)
    trainer.save_state()
    return trainer
