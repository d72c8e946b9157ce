"""One run per output directory: a lock, no silent overwrite, no resume of a different run.

`claim_run_dir` is what `gspo-trl train` does with its output_dir after the preflight checks and
before anything heavy is imported, so each refusal takes as long as `validate`: a flock lock
(gspo_trl.training.safety.run_lock) keeps a second run out while the first lives; a directory
holding a previous run's output is refused unless the launch says `--resume` or `--overwrite`;
`--resume` picks the newest checkpoint holding every part a resume reads
(gspo_trl.model.loading.checkpoints.resumable_checkpoint), refuses over a finished run with no
checkpoint left, and says a run already at its last step is complete (RunComplete: exit 0);
RUN_RECORD (gspo_trl.training.safety.run_record) makes `--resume` refuse a run whose defining
keys differ, listing each.

Only the launch's main process (RANK 0) takes the lock and writes; every process reaches the same
decisions from the same files. Docs: docs/scaling.md ("Resume after a crash").
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gspo_trl.config.recipe import Recipe
from gspo_trl.core.errors import RunDirError
from gspo_trl.core.metric_names import METRICS_FILE
from gspo_trl.model.loading.checkpoints import TRAINER_STATE, checkpoints_newest_first, resumable_checkpoint
from gspo_trl.training.safety.run_lock import LOCK_FILE, RunLock
from gspo_trl.training.safety.run_record import RUN_RECORD, compare_records, run_record

__all__ = ["LOCK_FILE", "RUN_RECORD", "RunClaim", "RunComplete", "RunLock", "claim_run_dir"]

logger = logging.getLogger(__name__)

STAGING = ".staging"
"""gspo_trl.training.probes.staged_checkpoints.STAGING, named here without transformers (a test pins it)."""


class RunComplete(Exception):
    """`--resume` of a run that already reached its last step: nothing to train (exit 0)."""


@dataclass
class RunClaim:
    """What `claim_run_dir` decided: the checkpoint to resume from (None: from scratch)."""

    output_dir: Path
    checkpoint: Path | None


def is_main_process() -> bool:
    """RANK 0 of a launch (accelerate and torchrun set RANK), or a plain process."""
    return int(os.environ.get("RANK", "0")) == 0


@contextlib.contextmanager
def claim_run_dir(
    recipe: Recipe, output_dir: str | Path, data: Any, resume: bool = False, overwrite: bool = False
) -> Iterator[RunClaim]:
    """Lock `output_dir` for this run and decide how it starts; released when the block ends."""
    if resume and overwrite:
        raise RunDirError("--resume and --overwrite: give one (--resume continues, --overwrite starts over)")
    folder = Path(output_dir)
    lock = RunLock(folder / LOCK_FILE) if is_main_process() else None
    if lock is not None:
        folder.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    try:
        record = run_record(recipe, data)
        checkpoint = _decide(folder, record, resume, overwrite)
        if lock is not None:
            _write_json(folder / RUN_RECORD, record)
        yield RunClaim(folder, checkpoint)
    finally:
        if lock is not None:
            lock.release()


def _decide(folder: Path, record: dict[str, Any], resume: bool, overwrite: bool) -> Path | None:
    previous = previous_run(folder)
    if overwrite:
        if previous and is_main_process():
            clear_previous_run(folder)
        return None
    if not resume:
        if previous:
            raise RunDirError(
                f"output_dir {str(folder)!r} holds a previous run ({', '.join(previous)}): continue it with "
                "--resume, start it again with --overwrite (deletes its checkpoints and logs), or give "
                "another output_dir"
            )
        return None
    checkpoint = resumable_checkpoint(folder)
    if checkpoint is None:
        if (folder / TRAINER_STATE).is_file():
            raise RunDirError(
                f"--resume: output_dir {str(folder)!r} holds a finished run and no complete checkpoint to "
                "resume from; train it again from scratch with --overwrite, or give another output_dir"
            )
        logger.warning("--resume: no complete checkpoint in %s; starting from scratch", folder)
        return None
    compare_records(folder, record, checkpoint)
    check_not_finished(folder, checkpoint, record)
    return checkpoint


def previous_run(folder: Path) -> list[str]:
    """What in `folder` is a previous run's training output (empty: nothing to lose)."""
    found = [path.name for path in reversed(checkpoints_newest_first(folder))]
    if len(found) > 2:
        found = [f"{found[0]} .. {found[-1]}"]
    for name in (TRAINER_STATE, METRICS_FILE):
        path = folder / name
        if path.is_file() and path.stat().st_size:
            found.append(name)
    return found


def clear_previous_run(folder: Path) -> None:
    """Delete what would mix with a new run: checkpoints (a later --resume would pick them),
    the staging folder, the trainer state, the metrics log and the run record. The model files
    are overwritten by the new run's save; the tiny model (built from fixed inputs) stays."""
    removed = []
    for path in [*reversed(checkpoints_newest_first(folder)), folder / STAGING]:
        if path.is_dir():
            shutil.rmtree(path)
            removed.append(path.name)
    for name in (TRAINER_STATE, METRICS_FILE, RUN_RECORD):
        if (folder / name).is_file():
            (folder / name).unlink()
            removed.append(name)
    logger.warning("--overwrite: removed the previous run's %s from %s", ", ".join(removed), folder)


def check_not_finished(folder: Path, checkpoint: Path, record: dict[str, Any]) -> None:
    """Raise RunComplete when `checkpoint` is at or past the step the resumed run would end at.

    transformers' Trainer resumed at its last step still trains one more before its
    `global_step >= max_steps` check (DefaultFlowCallback.on_step_end): `--resume` of a finished
    8-step run wrote checkpoint-9, and `--max_steps 8` over a 16-step run trained step 17 and
    replaced its final model. The end is `max_steps` when set, else (epochs) the total the
    checkpoint's own state recorded, when num_train_epochs is unchanged."""
    state = _read_state(checkpoint / TRAINER_STATE)
    if state is None:
        return  # resumable_checkpoint read it whole; a race with a deleting user is not ours
    step = int(state.get("global_step") or 0)
    keys = record["keys"]
    max_steps = keys.get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0:
        end, why = max_steps, f"max_steps is {max_steps}"
    elif keys.get("num_train_epochs") == state.get("num_train_epochs") and state.get("max_steps"):
        end, why = (
            int(state["max_steps"]),
            f"{state['num_train_epochs']} epoch(s) are {state['max_steps']} steps",
        )
    else:
        return
    if step < end:
        return
    final = _read_state(folder / TRAINER_STATE)
    model = (
        f"its final model is in {folder}"
        if final is not None and int(final.get("global_step") or 0) >= step
        else f"{checkpoint} holds its model (the final save did not happen)"
    )
    raise RunComplete(
        f"--resume: {folder} is complete: {checkpoint.name} is at step {step} and {why}; nothing to "
        f"train ({model}). To train on, raise max_steps above {step}"
    )


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _write_json(path: Path, content: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(json.dumps(content, indent=1, default=str) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        raise RunDirError(
            f"output_dir: cannot write {path} ({error.strerror}); remove what is there or give another "
            "output_dir"
        ) from None
