"""Checkpoints that appear whole or not at all: written into a staging folder, then renamed.

transformers 5.x (`Trainer._save_checkpoint`) writes straight into `OUTPUT_DIR/checkpoint-N`,
file after file: a crash or a full disk mid-save leaves a folder with the right name and
some of the files, which `--resume` would then pick. `StagedCheckpointsProbe` makes the Trainer
write the whole checkpoint into `OUTPUT_DIR/.staging/checkpoint-N` (same file system) and,
once every process has finished writing, renames it into place: one atomic step, so a
`checkpoint-N` folder either holds everything or does not exist. A staging folder left by a
crash is removed at the next save; the resolver (gspo_trl.model.loading.checkpoints) never looks
inside it. Old checkpoints are rotated (`save_total_limit`) after the rename.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from typing import Any

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import rotate_checkpoints

from gspo_trl.core.errors import CheckpointWriteError
from gspo_trl.training.probes.base import CheckpointSave, Probe

DISK_FULL_BYTES = 16 << 20
"""A failed save with less free space than this is reported as a full disk."""
STAGING = ".staging"
"""Folder under the run's output_dir where a checkpoint is written before it is renamed."""


class StagedCheckpointsProbe(Probe):
    """Points the Trainer's checkpoint writes at a staging folder, then renames it into place."""

    def around_checkpoint_save(self, trainer: Any, save: CheckpointSave, proceed: Callable[[], None]) -> None:
        run_dir, name = save.run_dir, save.name
        staging = os.path.join(run_dir, STAGING)
        staged, final = os.path.join(staging, name), os.path.join(run_dir, name)
        if trainer.args.should_save and os.path.exists(staged):
            shutil.rmtree(staged)  # left by a crash during an earlier save
        trainer.accelerator.wait_for_everyone()
        save.write_dir = staging  # every writer of the save asks the trainer for this folder
        try:
            proceed()
        except (OSError, RuntimeError) as error:
            free = shutil.disk_usage(staging).free
            if free >= DISK_FULL_BYTES:
                raise
            raise CheckpointWriteError(
                f"output_dir: the disk holding {run_dir!r} is full ({free} bytes free) while writing "
                f"{name}; nothing of it was kept. Free space, then rerun with --resume "
                f"(continues from the last complete checkpoint). ({type(error).__name__}: {error})"
            ) from error
        finally:
            save.write_dir = run_dir
        trainer.accelerator.wait_for_everyone()
        if trainer.args.should_save:
            if os.path.exists(final):  # saved again at the same step (e.g. at the end of training)
                shutil.rmtree(final)
            os.replace(staged, final)
            state = trainer.state
            best = state.best_model_checkpoint
            if best and best.startswith(staging):  # chosen during this save, named in staging
                state.best_model_checkpoint = run_dir + best[len(staging) :]
                _write_state(state, final)  # its copy in the checkpoint is what --resume reads
            with contextlib.suppress(OSError):  # not empty: another node's leftovers on a shared disk
                os.rmdir(staging)
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=trainer.args.save_total_limit,
                best_model_checkpoint=state.best_model_checkpoint,
                use_mtime=True,
            )
        trainer.accelerator.wait_for_everyone()


def _write_state(state: Any, checkpoint: str) -> None:
    """Rewrite the checkpoint's trainer_state.json from the (corrected) state, atomically."""
    path = os.path.join(checkpoint, TRAINER_STATE_NAME)
    state.save_to_json(path + ".tmp")
    os.replace(path + ".tmp", path)
