"""One rollout batch's step time, synchronous and overlapped (one step off-policy): the formula.

Per rollout batch the trainer waits for generation G, then trains for T (the pi_old forward, the
reference forward and the policy updates of gspo_trl.plan.throughput). Synchronously a step takes
G + T; a pipeline that generates batch k+1 while training on batch k takes max(G, T) once full.
That overlap needs the engine on GPUs of its own (`vllm_mode: server`); a colocated engine shares
the training GPUs, so there overlapped = synchronous and the plan says so. The weight sync is
not timed in either figure. On the server node G is a decode floor per data-parallel replica at
`trl vllm-serve`'s memory share and vLLM's max_num_seqs. Every figure is a floor at peak rates,
not a measurement. The TRL and vLLM defaults it reads: docs/plan.md ("Step time: synchronous vs
overlapped"); `engine.overlap: one_step` runs the overlap, its measured ratio in docs/async.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gspo_trl.plan.model_shape import ModelShape
from gspo_trl.plan.setup import Setup
from gspo_trl.plan.throughput import Throughput, decode_seconds
from gspo_trl.plan.vllm_memory import vllm_plan

VLLM_SERVE_GPU_MEMORY_UTILIZATION = 0.9
"""`trl vllm-serve`'s default `gpu_memory_utilization` (module docstring)."""
MEASURED = "engine.overlap: one_step; measured ratio: docs/async.md, scripts/bench_overlap.py"
"""Where the overlapped figure's measured counterpart is: the plan quotes a floor, the experiment
the ratio a real server and trainer reached (on CPU, each on a core of its own)."""
VLLM_SERVE_MAX_NUM_SEQS = 1024
"""vLLM's default max_num_seqs for `vllm serve` on a >= 70 GiB non-A100 GPU (module docstring)."""


@dataclass(frozen=True)
class ServerEngine:
    """The vLLM server node's engines: `data_parallel` replicas of `tensor_parallel` GPUs each."""

    tensor_parallel: int
    data_parallel: int
    source: str
    sequences_per_replica: int
    concurrent: int
    """Sequences one replica decodes at once: its share, capped by its KV cache and max_num_seqs."""
    seconds: float | None
    """The decode floor of one rollout batch; None when not one full sequence fits the KV cache."""


@dataclass(frozen=True)
class StepTime:
    """Seconds per rollout batch: generation G, training T, and both schedules' step time."""

    generation: float | None
    """G; None when not estimated (no engine size known)."""
    training: float
    """T = pi_old forward + reference forward + policy updates."""
    old_logprob: float
    reference: float
    updates: float
    optimizer_steps: float
    separate_engine: bool
    """True when the engine has GPUs of its own (vLLM server mode): only then can G and T overlap."""
    server: ServerEngine | None = None

    @property
    def synchronous(self) -> float | None:
        """G + T: the trainer waits for the rollout, the engine waits for the update."""
        return None if self.generation is None else self.generation + self.training

    @property
    def overlapped(self) -> float | None:
        """max(G, T) with a separate engine (one step off-policy); G + T when colocated."""
        if self.generation is None:
            return None
        return max(self.generation, self.training) if self.separate_engine else self.synchronous

    @property
    def speedup(self) -> float | None:
        """synchronous / overlapped: at most 2, reached when G = T."""
        if self.synchronous is None or not self.overlapped:
            return None
        return self.synchronous / self.overlapped


def server_engine(
    shape: ModelShape,
    setup: Setup,
    tensor_parallel: int | None,
    data_parallel: int | None,
    bandwidth_tb_s: float,
) -> ServerEngine:
    """The server node's decode floor for one rollout batch, split over its replicas. Without
    the recipe's `launch.server_*_parallel_size`, TP 1 x one replica per GPU is assumed."""
    source = "launch.server_tensor_parallel_size x server_data_parallel_size"
    if not tensor_parallel:
        tensor_parallel, source = 1, "assumed TP 1; set launch.server_tensor_parallel_size"
    if not data_parallel:
        data_parallel = max(1, setup.gpus_per_node // tensor_parallel)
        source += "; DP assumed GPUs per node / TP"
    engine_setup = dataclasses.replace(
        setup,
        vllm_tensor_parallel_size=tensor_parallel,
        vllm_gpu_memory_utilization=VLLM_SERVE_GPU_MEMORY_UTILIZATION,
    )
    sequences = math.ceil(setup.generation_batch_size / data_parallel)
    fitting = vllm_plan(shape, engine_setup).sequences_fitting_kv
    concurrent = min(sequences, fitting, VLLM_SERVE_MAX_NUM_SEQS)
    seconds = None
    if concurrent >= 1:
        seconds = decode_seconds(
            shape,
            engine_setup,
            sequences,
            concurrent,
            setup.max_prompt_length,
            setup.max_completion_length,
            bandwidth_tb_s,
        )
    return ServerEngine(tensor_parallel, data_parallel, source, sequences, concurrent, seconds)


def step_time(
    shape: ModelShape,
    setup: Setup,
    work: Throughput,
    server_tensor_parallel: int | None = None,
    server_data_parallel: int | None = None,
) -> StepTime:
    """G, T and both step times of one rollout batch (see the module docstring for the formula)."""
    world = setup.world_size
    old = work.seconds_for(work.old_logprob_flops, world)
    reference = work.seconds_for(work.reference_flops, world)
    updates = work.seconds_for(work.training_flops, world)
    server = None
    generation = work.generation_seconds
    separate = setup.use_vllm and not setup.colocated_vllm
    if separate:
        server = server_engine(
            shape, setup, server_tensor_parallel, server_data_parallel, work.bandwidth_tb_s
        )
        generation = server.seconds
    return StepTime(
        generation=generation,
        training=old + reference + updates,
        old_logprob=old,
        reference=reference,
        updates=updates,
        optimizer_steps=work.optimizer_steps,
        separate_engine=separate,
        server=server,
    )


def _s(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.1f} s"


def format_step_time(step: StepTime) -> list[str]:
    """The report's section: the terms, the formula, and both step times with their arithmetic."""
    lines = ["", "Step time per rollout batch: synchronous vs overlapped (floor; weight sync not timed)"]
    server = step.server
    if server is not None:
        where = (
            f"vLLM server node, {server.data_parallel} replica(s) x TP {server.tensor_parallel} "
            f"({server.source}); {server.sequences_per_replica} sequences per replica, "
            f"{server.concurrent} decoding at once; the whole-run floor above leaves it out"
        )
    else:
        where = "on the training GPUs"
    lines += [
        f"  G generation   {_s(step.generation)} ({where})",
        f"  T training     {_s(step.training)} = pi_old forward {step.old_logprob:.1f} s + reference "
        f"{step.reference:.1f} s + policy updates {step.updates:.1f} s",
    ]
    if step.generation is None:
        return [*lines, "  synchronous and overlapped: not estimated (no rollout fits the engine's KV cache)"]
    g, t, updates = step.generation, step.training, step.optimizer_steps
    lines.append(f"  synchronous    G + T = {g:.1f} + {t:.1f} = {step.synchronous:.1f} s")
    if step.separate_engine:
        lines.append(
            f"  overlapped     max(G, T) = max({g:.1f}, {t:.1f}) = {step.overlapped:.1f} s "
            f"(one step off-policy: the server generates batch k+1 while the trainer trains on k)"
        )
        lines.append(
            f"  speedup        {step.speedup:.2f}x; per optimizer step ({updates:g} per batch): "
            f"{step.synchronous / updates:.1f} s -> {step.overlapped / updates:.1f} s "
            f"({MEASURED})"
        )
    else:
        lines.append(
            "  overlapped     = synchronous: the engine shares the training GPUs (colocate or "
            "transformers generate); max(G, T) needs vllm_mode: server (docs/async.md)"
        )
    return lines
