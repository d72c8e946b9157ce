"""Entry point: `accelerate launch -m gspo_trl.train --config RECIPE [--resume | --overwrite] [--key ...]`.

The same command as `gspo-trl train RECIPE.yaml`: argv -> recipe -> the preflight checks
`gspo-trl validate` runs -> the output directory claimed (lock; `--resume` continues the run
there, `--overwrite` deletes a previous run's checkpoints and logs first; without either a
directory holding a previous run is refused) -> only then TRL, the model and training.
Refusals therefore cost what `validate` costs. Bad input ends in one line on stderr and exit
status 2, through the CLI's single error handler.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from gspo_trl.cli.recipe_args import pop_flag, split_argv
from gspo_trl.core.errors import RecipeError

USAGE = "gspo-trl train RECIPE.yaml [--resume | --overwrite] [--key value ...]  (or --config RECIPE.yaml)"


def main(argv: Sequence[str] | None = None) -> int:
    """Train a recipe (raises a UserError for bad input; the CLI reports it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: {USAGE}\n\n{__doc__}")
        return 0
    overwrite = pop_flag(argv, "--overwrite")
    path, resume, overrides = split_argv(argv)
    if path is None:
        raise RecipeError(f"no recipe given: {USAGE}")
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.preflight import output_dir_of, preflight
    from gspo_trl.training.safety.run_dir import RunComplete, claim_run_dir

    recipe = load_recipe(path, overrides, partial=True)  # preflight reports its problems with its own
    data = preflight(recipe)
    try:
        with claim_run_dir(recipe, output_dir_of(recipe), data, resume=resume, overwrite=overwrite) as claim:
            from gspo_trl.training.build import train_claimed  # TRL, torch, vLLM: only past every check

            train_claimed(recipe, data, claim.checkpoint)
    except RunComplete as complete:  # --resume of a finished run: nothing to do, and not an error
        logging.getLogger("gspo_trl").info("%s", complete)
        return 0
    release_process_group()
    return 0


def release_process_group() -> None:
    """Tear the process group down before the interpreter exits: left to interpreter teardown,
    gloo's threads can abort a finished launch ("terminate called without an active exception",
    exit -6, seen once in a 2-process test run), and accelerate then reports the run failed.

    A colocated vLLM engine holds its own groups over the default one, and its engine core tears
    them down from a `weakref.finalize` at exit (`cleanup_dist_env_and_memory()`,
    vllm/v1/engine/core.py:810): destroyed first by us, `_TP.destroy()` calls
    `torch.distributed.destroy_process_group(self.device_group)` (vllm/distributed/parallel_state.py:1387),
    torch raises "Invalid process group specified" (torch/distributed/distributed_c10d.py:1639) and
    a finished run ended in that traceback. vLLM's own cleanup runs first, so its finalizer later
    finds nothing left to destroy (`destroy_model_parallel` skips groups already None)."""
    import torch.distributed as dist

    vllm_state = sys.modules.get("vllm.distributed.parallel_state")
    if vllm_state is not None:  # a colocated vLLM engine: its groups first, then the default one
        vllm_state.cleanup_dist_env_and_memory()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    from gspo_trl.cli.main import run_command

    sys.exit(run_command("train", main, sys.argv[1:]))
