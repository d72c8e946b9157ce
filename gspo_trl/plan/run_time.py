"""The whole run's hours and cost, from the per-rollout-batch floors of gspo_trl.plan.throughput.

A run of `max_steps` optimizer steps generates ceil(max_steps / updates per rollout batch)
rollout batches; each one pays its generation (the decode floor), the pi_old forward when TRL
computes it, a reference forward when beta > 0, and the policy updates (their FLOPs at the
peak rate). The held-out evaluations (gspo_trl.plan.heldout_memory counts them: before step 1,
every `every_steps`, at the end) pay the same decode floor for their rows on the busiest shard.
Checkpoint saves, rewards, prefill, sampling and weight syncs are not timed, so every figure is
a floor: real RL steps run several times it. Cost is every GPU the run holds (a vLLM server
node's included) x hours x the price per GPU-hour (gspo_trl.plan.gpu_prices, or `--gpu-price`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction

from gspo_trl.plan.heldout_memory import HeldoutLoad
from gspo_trl.plan.planner import Plan
from gspo_trl.plan.throughput import decode_seconds


@dataclass(frozen=True)
class Price:
    """Dollars per GPU-hour and where the figure comes from (printed beside every cost)."""

    usd_per_gpu_hour: float
    source: str


@dataclass(frozen=True)
class RunPart:
    """One kind of work in the run: how many times it happens and the seconds each takes."""

    name: str
    count: int
    seconds_each: float | None
    """None: not estimated (generation on a vLLM server node)."""

    @property
    def seconds(self) -> float:
        return self.count * (self.seconds_each or 0.0)


@dataclass(frozen=True)
class RunTime:
    """The floor of a whole run on its hardware: its parts, their sum, and what it costs."""

    max_steps: int
    updates_per_rollout_batch: Fraction
    parts: tuple[RunPart, ...]
    gpus: int
    """GPUs held for the run's whole length (the cost multiplies by all of them)."""

    @property
    def rollout_batches(self) -> int:
        return self.parts[0].count

    @property
    def seconds(self) -> float:
        return sum(part.seconds for part in self.parts)

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    @property
    def complete(self) -> bool:
        """False when a part could not be timed (its seconds count as 0 in the total)."""
        return all(part.seconds_each is not None for part in self.parts if part.count)

    def cost(self, price: Price) -> float:
        return self.gpus * self.hours * price.usd_per_gpu_hour


def heldout_seconds(result: Plan, load: HeldoutLoad) -> float | None:
    """Decode floor of one held-out evaluation on its busiest shard; None when nothing decodes."""
    setup, sequences = result.setup, load.rows_per_shard * load.samples
    if load.batch_rows is None:  # the colocated engine, at its own concurrency
        concurrent = result.vllm.concurrent_sequences if result.vllm is not None else 0
    else:  # HF generate on a training rank: no vLLM tensor parallelism
        setup = dataclasses.replace(setup, use_vllm=False, vllm_tensor_parallel_size=1)
        concurrent = load.batch_rows
    if concurrent < 1 or sequences < 1:
        return None
    return decode_seconds(
        result.shape,
        setup,
        sequences,
        concurrent,
        setup.max_prompt_length,
        load.max_completion_length,
        result.throughput.bandwidth_tb_s,
    )


def run_time(result: Plan, max_steps: int, heldout: HeldoutLoad | None, gpus: int) -> RunTime:
    """The floor of `max_steps` optimizer steps plus the held-out evaluations, on `gpus` GPUs."""
    work, setup = result.throughput, result.setup
    updates = Fraction(setup.rollout_batch.optimizer_updates)
    batches = math.ceil(Fraction(max_steps) / updates)
    world = setup.world_size
    evaluations = (heldout.evaluations or 0) if heldout is not None else 0
    parts = (
        RunPart("rollout generation", batches, work.generation_seconds),
        RunPart("pi_old log-prob forward", batches, work.seconds_for(work.old_logprob_flops, world)),
        RunPart("reference forward", batches, work.seconds_for(work.reference_flops, world)),
        RunPart("policy updates", batches, work.seconds_for(work.training_flops, world)),
        RunPart(
            "held-out evaluations",
            evaluations,
            heldout_seconds(result, heldout) if heldout is not None and evaluations else 0.0,
        ),
    )
    return RunTime(max_steps=max_steps, updates_per_rollout_batch=updates, parts=parts, gpus=gpus)
