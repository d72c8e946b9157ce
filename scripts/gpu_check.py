"""The one GPU check: smoke (memory against the plan), bench (tokens/s, MFU, phase split) and
tiny-MoE routing replay (first-minibatch expert flips within a noise floor, float32 and bf16;
replay's step-time overhead), then one summary table naming what this machine cannot check; exit
1 when any part fails.

    scripts/gpu_check.sh                 # one CUDA GPU, no hub access, under 9 minutes
    scripts/gpu_check.sh --dry-run       # CPU: every part on the tiny models, no CUDA call (CI)

Each part is its own script in its own process (scripts/gpu_smoke.py, gpu_bench.py,
gpu_moe_replay.py: their docstrings say what each figure is), so each one's peak memory is its
own, and each has a time budget (PARTS): the three sum to 500 s, which with INSTALL_S for the
wheels stays under gpu_check.sh's 540 s cap (9 minutes of one 10-minute device command). The
budgets are estimates, not measurements: no GPU has run this yet. A part fails when its
script exits non-zero, runs past its budget, writes no result, or, for the smoke, when a run's
measured peak exceeds the plan's by more than SMOKE_TOLERANCE (a plan that under-counts cannot be
trusted to say FITS). Results: OUTPUT_DIR/<part>/ and OUTPUT_DIR/gpu_check.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
DRY_RUN_BUDGET_FACTOR = 5
"""A --dry-run part may take this many times its GPU budget: a busy shared CPU, not an H200."""
SMOKE_TOLERANCE = 1.10
"""Measured peak / planned peak (CUDA context left out of both) above which the smoke fails."""
INSTALL_S = 40
"""Allowed for scripts/gpu_run.sh's wheel installation before the parts start (12 wheels, 60 MiB,
pip --no-deps --target: 4 s on this project's 2-core CPU machine for the 10 a 3.11 dry run takes)."""
NOT_CHECKED = (
    "vLLM: the vllm 0.31 wheel is ~320 MB against a 64 MiB carry and pins torch 2.13 (the image has "
    "2.11), so no colocate/server generation, sleep mode, weight sync or engine routing (docs/vllm.md)",
    "DeepSpeed ZeRO, several GPUs or nodes: one GPU, no deepspeed wheel",
    "the hub checkpoints: random weights of their architectures, no downloads",
)
"""What the lent machine (one H200, no package registry, 64 MiB of carried wheels) cannot check."""


@dataclass(frozen=True)
class Part:
    """One script of the check: its arguments, time budget, result file and how to read it."""

    name: str
    script: str
    args: tuple[str, ...]
    budget_s: int
    result_file: str
    summarize: Callable[[Any], tuple[bool, str]] = field(compare=False)
    """(passed, one line of figures) from the result file's JSON."""


def _gib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.1f}"


def summarize_smoke(rows: list[dict[str, Any]]) -> tuple[bool, str]:
    """Each run's measured / planned peak GiB; fails above SMOKE_TOLERANCE."""
    passed, cells = True, []
    for row in rows:
        measured, planned = row["measured_peak_bytes"], row["planned_peak_bytes"]
        ratio = None if measured is None else measured / planned
        if ratio is not None and ratio > SMOKE_TOLERANCE:
            passed = False
        shown = "dry" if ratio is None else f"{ratio:.2f}x"
        cells.append(f"{row['run']} {_gib(measured)}/{_gib(planned)} GiB ({shown})")
    return passed, "measured/plan: " + "; ".join(cells)


def summarize_bench(result: dict[str, Any]) -> tuple[bool, str]:
    """Each model's generated tokens/s/GPU, the update's MFU and its two largest phases."""
    cells = []
    for row in result["rows"]:
        mfu = row["update_mfu"]
        phases = sorted(row["phase_seconds"].items(), key=lambda item: -item[1])[:2]
        split = ", ".join(f"{name} {100 * s / row['wall_seconds']:.0f}%" for name, s in phases)
        mfu_text = "n/a" if mfu is None else f"{100 * mfu:.1f}%"
        cells.append(
            f"{row['model'].rsplit('/', 1)[-1]} {row['generated_tokens_per_s_per_gpu']:,.0f} tok/s, "
            f"MFU {mfu_text}, {split}"
        )
    return True, "; ".join(cells)


def summarize_moe(result: dict[str, Any]) -> tuple[bool, str]:
    """First-minibatch flips per precision, a count over (token, layer) pairs against its noise
    floor (scripts/gpu_moe_replay.NOISE_FLOOR), and replay's step-time ratio."""
    cells = [
        f"{row['precision']} {row['flips']}/{row['pairs']} flips (floor {row['noise_floor']:.1%})"
        for row in result["rows"]
    ]
    passed = bool(result["rows"]) and all(row["passed"] for row in result["rows"])
    ratio = result["replay_over_off_step_time"]
    ratio_text = "n/a" if ratio is None else f"{ratio:.2f}"
    return passed, f"first-minibatch {'; '.join(cells)}; step time old/off {ratio_text}"


PARTS = (
    Part("smoke", "gpu_smoke.py", ("--steps", "8"), 160, "gpu_smoke.json", summarize_smoke),
    Part("bench", "gpu_bench.py", (), 230, "gpu_bench.json", summarize_bench),
    Part("moe replay", "gpu_moe_replay.py", (), 110, "gpu_moe_replay.json", summarize_moe),
)
"""Estimates, not measurements (no GPU has run this). The smoke trains a 0.44B model, the bench
builds, saves and reloads Qwen3-0.6B and 1.7B (now in bf16, half the bytes) and trains them at 512
tokens: the bench's setup is the largest. 70 s came off the smoke's old 230: 20 to the bench (old
210), 10 to the MoE part's float32 row (old 100), 40 to the installation, now inside the cap."""


@dataclass
class Outcome:
    part: str
    status: str  # ok | FAILED | TIMED OUT
    figures: str
    seconds: float


def run_part(part: Part, output_dir: Path, dry_run: bool) -> Outcome:
    """Run one part's script in its own process group, stopped (the group) past its budget."""
    folder = output_dir / part.name.replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(SCRIPTS / part.script), *part.args, "--output-dir", str(folder)]
    budget = part.budget_s * (DRY_RUN_BUDGET_FACTOR if dry_run else 1)
    if dry_run:
        command.append("--dry-run")
    print(f"== {part.name}: {' '.join(command[1:])} (budget {budget} s)", flush=True)
    started = time.monotonic()
    process = subprocess.Popen(command, start_new_session=True)
    try:
        code = process.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return Outcome(part.name, "TIMED OUT", f"past its {budget} s budget", time.monotonic() - started)
    seconds = time.monotonic() - started
    result = folder / part.result_file
    if code != 0 or not result.is_file():
        why = f"exit {code}" if code != 0 else f"no {part.result_file}"
        return Outcome(part.name, "FAILED", why, seconds)
    passed, figures = part.summarize(json.loads(result.read_text()))
    return Outcome(part.name, "ok" if passed else "FAILED", figures, seconds)


def summary_table(outcomes: list[Outcome], device: str) -> str:
    lines = [f"GPU check on {device}", f"{'part':11s} {'status':9s} {'s':>5s}  figures"]
    lines += [f"{o.part:11s} {o.status:9s} {o.seconds:5.0f}  {o.figures}" for o in outcomes]
    failed = [o.part for o in outcomes if o.status != "ok"]
    lines.append("all parts passed" if not failed else f"FAILED: {', '.join(failed)}")
    lines += ["not checked on this machine:", *(f"  - {line}" for line in NOT_CHECKED)]
    return "\n".join(lines)


def device_name(dry_run: bool) -> str:
    if dry_run:
        return "CPU (dry run: the wiring only, the numbers mean nothing)"
    import torch

    return torch.cuda.get_device_name()


def main(argv: list[str] | None = None, parts: tuple[Part, ...] = PARTS) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny models, no CUDA calls")
    parser.add_argument("--output-dir", default="runs/gpu-check")
    args = parser.parse_args(argv)
    if not args.dry_run:
        from gpu_common import cuda_missing

        if cuda_missing("gpu_check"):
            return 2
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    outcomes = [run_part(part, output_dir, args.dry_run) for part in parts]
    table = summary_table(outcomes, device_name(args.dry_run))
    (output_dir / "gpu_check.json").write_text(json.dumps([o.__dict__ for o in outcomes], indent=2))
    print(table)
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(SCRIPTS))
    sys.exit(main())
