"""MoE routing experiment: token-level GRPO vs GSPO, each without and with routing replay (R2),
on a tiny Qwen3-MoE warm-started like the demo on the reversal task (docs/moe.md).

The GSPO paper (Zheng et al. 2025) reports that in Qwen3-30B-A3B ~10% of the activated experts
change after each gradient update, that token-level GRPO needed routing replay to converge and
that GSPO did not. This script asks the same question at CPU scale:

    run       (algorithm grpo|gspo) x (moe.routing_replay off|old) x (steps_per_generation 4|8) x
              seeds, the same recipe and budget (recipes/tiny/reversal.yaml through load_recipe +
              train_recipe, as the demo); one result JSON per run, then the table.
    sweep     the same runs over learning rates (and steps_per_generation): instability against
              the measured flip rate.
    overhead  seconds per step with routing_replay off vs old, alternating runs in one process.

The model (BENCH_SPEC) is built locally and warm-started once (gspo_trl.demo.warm_start, cached
under OUTPUT_DIR/warm-start) for every run. Each run's raw record (the logged per-step series, the
held-out scores, and the spread of the *token* log-ratios, which `ObservedProbe` reads in the
loss) goes to OUTPUT_DIR/results/RUN.json; a run whose record exists is not trained again. The
table's columns (flip rate, clip fraction, ratio spreads, grad-norm spikes, held-out accuracy,
collapses) are defined in scripts/moe_routing_summary.py.

    .venv/bin/python scripts/bench_moe_routing.py run --output-dir runs/moe-bench        # 24 runs
    .venv/bin/python scripts/bench_moe_routing.py sweep --output-dir runs/moe-bench --lrs 1e-3 3e-3
    .venv/bin/python scripts/bench_moe_routing.py overhead --output-dir runs/moe-bench
    .venv/bin/python scripts/bench_moe_routing.py run --smoke --output-dir /tmp/x  # seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from gspo_trl.config.defaults import ALGORITHMS
from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.shipped import RECIPES_DIR
from gspo_trl.data.synthetic import ReversalTask
from gspo_trl.demo.warm_start import WarmStartSettings, warm_start
from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe
from gspo_trl.training.build import train_recipe
from gspo_trl.training.heldout.scoring import HeldoutCallback
from gspo_trl.training.probes.base import LossCall, PolicyForward, Probe
from gspo_trl.training.probes.routing import ROUTED_EXPERTS, RoutingProbe

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the summary and the overhead clock live beside it
import moe_replay_overhead as replay_overhead
import moe_routing_summary as summary

RECIPE = RECIPES_DIR / "tiny" / "reversal.yaml"
MEASURED_SFT_STEPS = 1000
BENCH_SPEC = TinyMoeSpec(num_experts=16)
"""4 layers of 16 experts, top-2, hidden 128, head_dim 32: 3.4M parameters."""
SMOKE_SPEC = TinyMoeSpec(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2)
ALGOS, REPLAYS, SPGS = ("grpo", "gspo"), ("off", "old"), (4, 8)
SWEEP_ARMS = "grpo-off-4,gspo-off-4,grpo-off-8,gspo-off-8"
SWEEP_LRS = (1, 3, 10, 30)
"""sweep: multiples of the recipe's learning rate."""


@dataclasses.dataclass(frozen=True)
class Arm:
    algorithm: str
    replay: str
    spg: int
    learning_rate: float

    def run_id(self, seed: int) -> str:
        return f"{self.algorithm}-{self.replay}-spg{self.spg}-lr{self.learning_rate:g}-s{seed}"


class ObservedProbe(Probe):
    """Measures, on each off-policy update, what the logs do not:

    - `token_log_ratio_std`: the std of logp_new - logp_old over the response tokens (the
      diagnostics log only the sequence-level log s_i), from the loss's policy pass
      (`on_policy_forward`, TRL's `_get_per_token_logps_and_entropies` call at
      trl/trainer/grpo_trainer.py:3030, before it reads `inputs["old_per_token_logps"]`, :3065).
    - `routing_token_std` / `routing_seq_std`: the part of the ratio that routing alone makes, the
      std over response tokens (and over responses, of the per-response mean) of logp with the
      routers' own choice minus logp with pi_old's routing replayed, both at the current weights.
      The arm's own policy pass gives one of the two; one extra no-grad forward before it
      (`on_loss_inputs`) gives the other (replay forced through the trainer's RoutingHooks in an
      arm without replay, hooks idle in an arm with it). A forward consumes no randomness, so the
      run's trajectory is unchanged.
    """

    def __init__(self) -> None:
        self.token_log_ratio_std: list[float] = []
        self.routing_token_std: list[float] = []
        self.routing_seq_std: list[float] = []
        self._other: torch.Tensor | None = None

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        self._other = None
        if loss.training and loss.minibatch >= 2 and loss.batch.get("old_per_token_logps") is not None:
            routing = trainer.probes.find(RoutingProbe).routing
            routing.end_update()  # the update's routing pass (RoutingProbe): nothing has run in it yet
            try:
                self._other = self._other_routing_logps(trainer, loss.batch)
            finally:
                routing.begin_update(loss.batch)

    @staticmethod
    def _other_routing_logps(trainer: Any, inputs: dict[str, Any]) -> torch.Tensor | None:
        """Response-token log-probs at the current weights under the routing the arm does not use."""
        hooks, routing = trainer.probes.find(RoutingProbe).routing.hooks, inputs.get(ROUTED_EXPERTS)
        if hooks is None or routing is None:
            return None
        force_replay = not trainer.probes.find(RoutingProbe).routing.config.replays
        if force_replay:
            hooks.begin(reference=routing, replay=True)
        try:
            with torch.no_grad():
                return trainer.plain_logprobs(trainer.model, inputs)
        finally:
            if force_replay:
                hooks.end()

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        other, self._other = self._other, None
        loss = policy.loss
        if not (loss.training and loss.minibatch >= 2) or policy.old_logps is None:
            return
        mask = loss.batch["completion_mask"].bool()
        new = policy.logps
        self.token_log_ratio_std.append(_std((new - policy.old_logps)[mask]))
        if other is not None:
            own, replayed = (
                (other, new) if trainer.probes.find(RoutingProbe).routing.config.replays else (new, other)
            )
            gap = (own - replayed).masked_fill(~mask, 0.0)
            self.routing_token_std.append(_std(gap[mask]))
            self.routing_seq_std.append(_std(gap.sum(-1) / mask.sum(-1).clamp(min=1)))


def _std(values: torch.Tensor) -> float:
    return float(values.float().std()) if values.numel() > 1 else math.nan


# --- model ------------------------------------------------------------------------------------------
def prepare_model(output_dir: Path, smoke: bool) -> Path:
    """The tiny MoE, warm-started like the demo; built and trained once, then reused (cached by hash)."""
    spec = SMOKE_SPEC if smoke else BENCH_SPEC
    base = save_tiny_moe(output_dir / "tiny-moe", spec)
    # The warm start docs/measurements/moe_routing/ was measured with (the demo's of the time:
    # 1000 steps; the demo's own default has moved since).
    settings = WarmStartSettings(steps=20 if smoke else MEASURED_SFT_STEPS)
    started = time.time()
    warm = warm_start(base, output_dir / "warm-start", ReversalTask(), settings)
    params = sum(p.numel() for p in _load(warm).parameters())
    print(
        f"model: {spec} = {params / 1e6:.2f}M parameters; warm start {time.time() - started:.0f} s",
        flush=True,
    )
    return warm


def _load(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)


# --- one run ------------------------------------------------------------------------------------------
def recipe_for(warm: Path, run_dir: Path, arm: Arm, seed: int, steps: int, smoke: bool) -> Any:
    """The demo recipe with this arm's algorithm, replay, steps_per_generation, seed and budget.
    GRPO takes its own clip range (gspo_trl.config.defaults.ALGORITHMS); GSPO keeps the recipe's."""
    overrides: dict[str, Any] = {
        "model.name_or_path": str(warm),
        # TRL's SFTTrainer saves the warm start with output_router_logits: true
        # (trl/trainer/sft_trainer.py:1210), and HF generate then computes the load-balancing loss
        # over a cached step's router logits against the whole attention mask and fails
        # (transformers/models/qwen3_moe/modeling_qwen3_moe.py:573). GRPO asks for the router
        # logits in its loss forward itself (trl/trainer/grpo_trainer.py:1492).
        "model.extra_init_kwargs": {"output_router_logits": False},
        "output_dir": str(run_dir),
        "algorithm": arm.algorithm,
        "moe.routing_replay": arm.replay,
        "steps_per_generation": arm.spg,
        "learning_rate": arm.learning_rate,
        "lr_scheduler_type": "constant",  # the rate the measurements were made with
        "seed": seed,
        "max_steps": steps,
        "logging_steps": 1,  # every optimizer step's grad_norm and routing
        "heldout.every_steps": 0,  # before and after only
        "heldout.k": [],
    }
    if arm.algorithm == "grpo":
        overrides.update({k: ALGORITHMS["grpo"][k] for k in ("epsilon", "epsilon_high")})
    if smoke:
        overrides.update({"heldout.max_rows": 8, "data.num_rows": 200, "data.eval_size": 8})
    return load_recipe(RECIPE, overrides)


def run_one(warm: Path, output_dir: Path, arm: Arm, seed: int, steps: int, smoke: bool) -> dict[str, Any]:
    """Train one run (or read its record when a previous invocation finished it) -> its raw record."""
    result_path = output_dir / "results" / f"{arm.run_id(seed)}.json"
    if result_path.is_file():
        return json.loads(result_path.read_text())
    run_dir = output_dir / "runs" / arm.run_id(seed)
    recipe = recipe_for(warm, run_dir, arm, seed, steps, smoke)
    started = time.time()
    observed = ObservedProbe()
    trainer = train_recipe(recipe, overwrite=True, probes=[observed])
    heldout = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldoutCallback))
    steps_logged = [e for e in trainer.state.log_history if "loss" in e and "train_runtime" not in e]
    record = {
        "run": arm.run_id(seed),
        **dataclasses.asdict(arm),
        "seed": seed,
        "seconds": round(time.time() - started, 1),
        "heldout": heldout.history,
        "token_log_ratio_std": observed.token_log_ratio_std,
        "routing_token_std": observed.routing_token_std,
        "routing_seq_std": observed.routing_seq_std,
        "history": [{k: e[k] for k in summary.KEPT_KEYS if k in e} for e in steps_logged],
    }
    for weights in run_dir.glob("*.safetensors"):  # keep the logs, not 14 MB of weights a run
        weights.unlink()
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(record) + "\n")
    return record


# --- tables -----------------------------------------------------------------------------------------------
def report(output_dir: Path, records: list[dict[str, Any]], name: str, started: float) -> None:
    """Print the tables (scripts/moe_routing_summary.py) and write them, and the rows, under output_dir."""
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    heading = (
        f"## {name}: {len(records)} runs, {time.time() - started:.0f} s this invocation, load average {load} "
        f"(/proc/loadavg at the end), {torch.get_num_threads()} torch thread(s), {os.cpu_count()} cores"
    )
    text, rows = summary.tables(records, heading)
    print(text, flush=True)
    (output_dir / f"{name}_table.md").write_text(text)
    (output_dir / f"{name}_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


# --- subcommands ------------------------------------------------------------------------------------------
def grid(args: argparse.Namespace, arms: list[Arm], name: str) -> list[dict[str, Any]]:
    started = time.time()
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    warm = prepare_model(output_dir, args.smoke)
    records = []
    for seed in range(args.seeds):  # seed-major: a stopped invocation has every arm at seed 0
        for arm in arms:
            print(f"== {name}: {arm.run_id(seed)}", flush=True)
            records.append(run_one(warm, output_dir, arm, seed, args.steps, args.smoke))
    report(output_dir, records, name, started)
    return records


def parse_arms(text: str, learning_rates: list[float]) -> list[Arm]:
    """'grpo-off-4,gspo-old-8' -> arms at each learning rate; 'all': the full 2 x 2 x 2 grid."""
    if text == "all":
        specs = [(a, r, s) for s in SPGS for a in ALGOS for r in REPLAYS]
    else:
        specs = []
        for item in text.split(","):
            algorithm, replay, spg = item.split("-")
            if algorithm not in ALGOS or replay not in REPLAYS or not spg.isdigit():
                raise SystemExit(f"--arms: {item!r} is not ALGORITHM-REPLAY-SPG like grpo-off-4")
            specs.append((algorithm, replay, int(spg)))
    return [Arm(a, r, s, lr) for lr in learning_rates for a, r, s in specs]


def overhead(args: argparse.Namespace) -> None:
    """Replay's cost per step, side by side with routing_replay off (scripts/moe_replay_overhead.py)."""
    output_dir = Path(args.output_dir)
    warm = prepare_model(output_dir, args.smoke)
    arm = Arm("gspo", "off", 4, args.lrs[0])
    recipe = recipe_for(warm, output_dir / "overhead", arm, 0, args.steps, args.smoke)
    passes = 5 if args.smoke else 60
    text = replay_overhead.measure(replay_overhead.trainer_run(recipe), warm, args.rounds, args.steps, passes)
    print(text, flush=True)
    (output_dir / "overhead_table.md").write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("run", "sweep", "overhead"))
    parser.add_argument("--output-dir", default="runs/moe-bench", help="model, runs, results/*.json, tables")
    parser.add_argument("--arms", help=f"'all' or e.g. grpo-off-4,gspo-old-8 (run: all, sweep: {SWEEP_ARMS})")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps a run (default 200)")
    parser.add_argument(
        "--lrs", type=float, nargs="+", help=f"learning rates (run: the recipe's, sweep: {SWEEP_LRS})"
    )
    parser.add_argument("--rounds", type=int, default=8, help="overhead: pairs of runs (smoke: 1)")
    parser.add_argument("--smoke", action="store_true", help="tiny model, few steps: seconds, no meaning")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one thread: least noise on shared cores (gspo_trl.core.cpu_threads)
    if args.steps is None:
        args.steps = {"overhead": 40}.get(args.command, 200) if not args.smoke else 4
    if args.smoke and args.command == "overhead":
        args.rounds = 1
    base_lr = float(load_recipe(RECIPE).training["learning_rate"])
    args.lrs = args.lrs or ([base_lr] if args.command != "sweep" else [base_lr * f for f in SWEEP_LRS])
    if args.command == "overhead":
        overhead(args)
        return 0
    arms = parse_arms(args.arms or ("all" if args.command == "run" else SWEEP_ARMS), args.lrs)
    grid(args, arms, args.command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
