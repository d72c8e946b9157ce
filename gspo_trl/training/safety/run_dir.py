"""One run per output directory: a lock, no silent overwrite, no resume of a different run.

`claim_run_dir` is what `gspo-trl train` does with its output_dir after the preflight checks
and before anything heavy is imported, so each refusal below takes as long as `validate`:

- a lock file (LOCK_FILE) held with flock and naming the holder (pid, host, start) keeps a
  second run out while the first lives; the kernel lets go of a dead holder's lock (kill -9, a
  crash), and the next run takes it over with a warning naming the run that left it;
- a directory holding a previous run's training output (checkpoints, trainer_state.json,
  metrics.jsonl) is refused unless the launch says what to do with it: `--resume` continues
  it, `--overwrite` deletes its checkpoints and logs first (what the HF Trainer's users know
  as overwrite_output_dir), so a later `--resume` cannot jump into the old run's checkpoints;
- `--resume` picks the newest checkpoint holding every part a resume reads
  (gspo_trl.model.checkpoints.resumable_checkpoint) and refuses over a finished run with no
  checkpoint left instead of starting it again from scratch;
- RUN_RECORD holds what defines the run (every resolved recipe key, the data's fingerprint,
  the number of processes); `--resume` refuses when a defining key differs, listing each, and
  warns for keys that only change logging, saving or length (HARMLESS_KEYS).

Only the launch's main process (RANK 0) takes the lock and writes; every process reaches the
same decisions from the same files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gspo_trl.config.recipe import Recipe, recipe_as_yaml
from gspo_trl.errors import RunDirError
from gspo_trl.metric_names import METRICS_FILE
from gspo_trl.model.checkpoints import TRAINER_STATE, checkpoints_newest_first, resumable_checkpoint

logger = logging.getLogger(__name__)

LOCK_FILE = ".gspo-trl.lock"
RUN_RECORD = "run.json"
STAGING = ".staging"
"""gspo_trl.training.safety.staged_checkpoints.STAGING, named here without transformers (a test pins it)."""
FINGERPRINT_ROWS = 1000
"""Rows hashed whole into the data fingerprint (with the row count and the column names)."""
HARMLESS_KEYS = (
    "output_dir",
    "logging_steps",
    "logging_first_step",
    "logging_strategy",
    "report_to",
    "run_name",
    "project",
    "trackio_space_id",
    "save_steps",
    "save_strategy",
    "save_total_limit",
    "save_only_model",
    "max_steps",
    "num_train_epochs",
    "eval_steps",
    "eval_strategy",
    "per_device_eval_batch_size",
    "dataloader_num_workers",
    "log_completions",
    "num_completions_to_print",
    "gradient_checkpointing",
    "vllm_server_host",
    "vllm_server_port",
    "vllm_server_timeout",
    "vllm_gpu_memory_utilization",
    "heldout.",
    "diagnostics.",
)
"""Keys (a trailing dot: a whole section) a resumed run may change: they decide what is logged,
saved, evaluated or how long it trains, not what is trained on or how. Every other key defines
the run."""


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


# --- what defines a run ----------------------------------------------------------------------


def run_record(recipe: Recipe, data: Any) -> dict[str, Any]:
    """The run's identity: every resolved recipe key (flattened), the data fingerprint, processes."""
    text = recipe_as_yaml(recipe)
    content = yaml.safe_load(text)
    keys = _flatten({key: value for key, value in content.items()})
    keys["data (fingerprint of the training rows)"] = (
        data_fingerprint(data.train) if data is not None else None
    )
    keys["processes"] = int(os.environ.get("WORLD_SIZE", "1"))
    return {"recipe_sha256": hashlib.sha256(text.encode()).hexdigest(), "keys": keys}


def data_fingerprint(rows: Any) -> str:
    """sha256 of the row count, the column names and the first FINGERPRINT_ROWS rows."""
    digest = hashlib.sha256(json.dumps([len(rows), sorted(rows.column_names)]).encode())
    for row in rows.select(range(min(FINGERPRINT_ROWS, len(rows)))):
        digest.update(json.dumps(row, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


NESTED_SECTIONS = ("model", "data", "heldout", "diagnostics", "engine", "moe")
"""Recipe sections compared key by key between a run and its resume."""


def _flatten(content: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in content.items():
        if (
            isinstance(value, dict)
            and value
            and key in ("model", "data", "heldout", "diagnostics", "engine", "moe")
        ):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _harmless(key: str) -> bool:
    return any(key == entry or (entry.endswith(".") and key.startswith(entry)) for entry in HARMLESS_KEYS)


def compare_records(folder: Path, record: dict[str, Any], checkpoint: Path | None = None) -> None:
    """Refuse a resume whose defining keys differ from the run's record; warn for harmless ones.
    Without a record (deleted, or an older gspo-trl), the checkpoint's training_args.bin is
    what the run trained with (`checkpoint_settings`)."""
    path = folder / RUN_RECORD
    try:
        old = json.loads(path.read_text(encoding="utf-8"))["keys"]
        if not isinstance(old, dict):
            raise TypeError(f"'keys' is a {type(old).__name__}, not a mapping")
    except FileNotFoundError:
        old = checkpoint_settings(checkpoint, record["keys"]) if checkpoint is not None else None
        if old is None:
            logger.warning("--resume: %s has no %s; not checked for a different run", folder, path.name)
            return
        logger.warning(
            "--resume: %s has no %s; checking against %s instead (its training settings only)",
            folder,
            path.name,
            checkpoint / TRAINING_ARGS,
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RunDirError(
            f"--resume: {path} is unreadable ({error}); resume with --overwrite or a new output_dir"
        ) from None
    new = record["keys"]
    changed = [key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    shown = [f"{key} ({_short(old.get(key))} -> {_short(new.get(key))})" for key in changed]
    defining = [text for key, text in zip(changed, shown, strict=True) if not _harmless(key)]
    harmless = [text for key, text in zip(changed, shown, strict=True) if _harmless(key)]
    if defining:
        raise RunDirError(
            f"--resume: {folder} is a different run: {'; '.join(defining)}. Resume it with the settings it "
            f"started with ({folder / 'recipe.yaml'}), or train into another output_dir"
        )
    if harmless:
        logger.warning("--resume: changed since %s started (fine to change): %s", folder, "; ".join(harmless))


TRAINING_ARGS = "training_args.bin"
"""What the Trainer pickles into every checkpoint: the TrainingArguments (GSPOConfig) it ran with."""
MACHINE_KEYS = ("output_dir", "use_cpu", "bf16")
"""Training keys gspo_trl.training.build.gspo_config rewrites for the machine (bf16 off on a CPU)."""


def checkpoint_settings(checkpoint: Path, keys: dict[str, Any]) -> dict[str, Any] | None:
    """The values the checkpoint's run trained with, for every key of `keys` its GSPOConfig has
    as a plain value, from training_args.bin (None when it cannot be read). Keys it has no value
    for are copied from `keys`, so only what it recorded can differ.

    training_args.bin is a pickle (the Trainer writes it with torch.save); it is read only here,
    from the run's own output_dir, which the user's earlier run wrote."""
    try:
        import torch

        args = torch.load(checkpoint / TRAINING_ARGS, weights_only=False)
    except Exception as error:  # a missing or foreign file: say so, check nothing
        logger.warning("--resume: cannot read %s (%s)", checkpoint / TRAINING_ARGS, error)
        return None
    old = dict(keys)
    for key in keys:
        value = getattr(args, key, None)
        value = getattr(value, "value", value)  # enums (lr_scheduler_type, save_strategy, ...)
        if key in MACHINE_KEYS or not isinstance(value, int | float | str | bool):
            continue
        if not isinstance(keys[key], int | float | str | bool):
            continue
        old[key] = value
    return old


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


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


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


# --- the lock ----------------------------------------------------------------------------------


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    current = _process_start(pid)
    return started is None or current is None or current == started  # a reused pid is not the holder


class RunLock:
    """OUTPUT_DIR/LOCK_FILE, held with `fcntl.flock` for the life of the run and holding its
    holder as JSON (for the message a second run gets).

    The kernel decides who holds it: one process among any number racing, and a holder that
    dies (kill -9, a crash, OOM) lets go with its last file descriptor, so a stale lock is never
    removed by anyone and no take-over can race another. The file is never unlinked (a process
    blocked on an unlinked file would lock a name no one else sees); a clean release empties
    it, so a file still naming a holder that no longer runs is what a crashed run left: taking
    it over is announced. A recorded holder that still runs but holds no flock (a gspo-trl older
    than this lock) is respected. On NFS, Linux implements flock with the server's byte-range
    locks (nfs(5), "local_lock"), so it holds across hosts too.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "process_start": _process_start(os.getpid()),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            raise RunDirError(
                f"output_dir: cannot open the run lock {self.path}: {error.strerror}; "
                "remove what is there or give another output_dir"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            recorded = _read_holder(fd)
            os.close(fd)
            raise self._in_use(recorded) from None
        except OSError as error:
            os.close(fd)
            raise RunDirError(f"output_dir: cannot lock {self.path}: {error.strerror}") from None
        recorded = _read_holder(fd)
        if recorded is not None and self._still_running(recorded):
            os.close(fd)  # an older gspo-trl's lock (no flock), its run still alive
            raise self._in_use(recorded)
        if recorded is not None:
            logger.warning(
                "output_dir: taking over the lock %s of pid %s (started %s), which no longer runs",
                self.path,
                recorded.get("pid"),
                recorded.get("since"),
            )
        elif os.fstat(fd).st_size:
            logger.warning("output_dir: taking over an unreadable run lock %s", self.path)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.holder).encode(), 0)
        self._fd = fd

    def _still_running(self, recorded: dict[str, Any]) -> bool:
        try:
            pid, host = int(recorded["pid"]), str(recorded["host"])
        except (KeyError, TypeError, ValueError):
            return False
        if pid == os.getpid() or host != socket.gethostname():
            return False  # another host's dead lock-less holder cannot be told from a live one: flock rules
        return _alive(pid, recorded.get("process_start"))

    def _in_use(self, recorded: dict[str, Any] | None) -> RunDirError:
        if recorded is None:  # the winner of a race has not written its name yet
            who = "another run"
        else:
            host = recorded.get("host")
            elsewhere = "" if host == socket.gethostname() else " (another host)"
            since = recorded.get("since")
            who = f"another run: pid {recorded.get('pid')} on {host}, since {since}{elsewhere}"
        return RunDirError(
            f"output_dir {str(self.path.parent)!r} is in use by {who}; wait for it or give another output_dir"
        )

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)  # empty: not a crashed run's lock
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None


def _read_holder(fd: int) -> dict[str, Any] | None:
    """The holder recorded in the lock file, or None (empty, partly written, not ours)."""
    try:
        content = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) and "pid" in content else None
