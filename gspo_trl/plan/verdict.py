"""Does the setup fit one GPU, which term dominates, and which change to try first.

Peak memory is the always-live `state` terms plus the largest phase: the policy's
forward/backward (`train`), vLLM's rollout (`rollout`, when it sleeps during training) or the
optimizer step (`step`). "tight" above 90% of the GPU leaves too little for allocator
fragmentation and communication buffers, which the plan only estimates. Fixes are listed
cheapest first for the dominant term; the planner re-plans each and recommends the first that
fits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gspo_trl.plan.memory import MemoryTerm
from gspo_trl.plan.setup import LINEAR_MODULES, LoraSpec, Setup

FITS, TIGHT, DOES_NOT_FIT = "fits", "tight", "does not fit"
TIGHT_FRACTION = 0.9
PHASES = ("train", "rollout", "step")
"""Phases that are live one at a time, each beside the `state` terms (gspo_trl.plan.memory.MemoryTerm)."""
STATE_TERMS = ("weights", "gradients", "master", "optimizer", "DDP", "reference")


@dataclass(frozen=True)
class Fix:
    """A change to the setup, in the user's words and as Setup field overrides."""

    description: str
    overrides: dict[str, Any]

    def apply(self, setup: Setup) -> Setup:
        return dataclasses.replace(setup, **self.overrides)


def override_flags(fixes: list[Fix]) -> str:
    """Fixes applied in turn, as recipe overrides to paste after `gspo-trl plan/train RECIPE`
    (a key a later fix sets again appears once, with its last value)."""
    merged: dict[str, Any] = {}
    for fix in fixes:
        merged.update(fix.overrides)
    return " ".join(override_flag(key, value) for key, value in merged.items())


def override_flag(key: str, value: Any) -> str:
    """One Setup override as the recipe key that sets it: `--per_device_train_batch_size 16`,
    `--launch.accelerate_config configs/zero3.yaml`, `--model.lora '{r: 16, ...}'`."""
    if key == "strategy":
        return f"--launch.accelerate_config configs/{value}.yaml"
    if key == "lora":
        modules = (
            "all-linear" if tuple(value.target_modules) == LINEAR_MODULES else list(value.target_modules)
        )
        return f"--model.lora '{{r: {value.r}, lora_alpha: {2 * value.r}, target_modules: {modules}}}'"
    if isinstance(value, bool):
        return f"--{key} {str(value).lower()}"
    return f"--{key} {value}"


@dataclass(frozen=True)
class Verdict:
    """`status` is fits / tight / does not fit; `dominant` the largest term live at the peak."""

    status: str
    peak_bytes: int
    gpu_bytes: int
    peak_phase: str
    dominant: MemoryTerm
    fix: str | None = None
    fix_flags: str | None = None
    """`fix` as recipe overrides, ready to paste (None: no change the plan knows)."""


def classify(terms: list[MemoryTerm], gpu_bytes: int) -> Verdict:
    """The peak phase's total against the GPU, and the term that weighs most in it."""
    state = [t for t in terms if t.phase == "state"]
    phases = {phase: state + [t for t in terms if t.phase == phase] for phase in PHASES}
    peak_phase = max(phases, key=lambda p: sum(t.bytes for t in phases[p]))
    live = phases[peak_phase]
    peak = sum(t.bytes for t in live)
    if peak > gpu_bytes:
        status = DOES_NOT_FIT
    elif peak > TIGHT_FRACTION * gpu_bytes:
        status = TIGHT
    else:
        status = FITS
    dominant = max(live, key=lambda t: t.bytes)
    return Verdict(status, peak, gpu_bytes, peak_phase, dominant)


def _smaller_batches(setup: Setup) -> list[Fix]:
    """Halve per_device_train_batch_size; raise accumulation and steps_per_generation to keep the
    rollout batch (and so the GSPO group statistics) unchanged."""
    fixes = []
    batch, factor = setup.per_device_train_batch_size, 2
    while batch // factor >= 1 and batch % factor == 0:
        accumulation = setup.gradient_accumulation_steps * factor
        steps = setup.steps_per_generation * factor
        fixes.append(
            Fix(
                f"per_device_train_batch_size {batch // factor} with gradient_accumulation_steps "
                f"{accumulation} and steps_per_generation {steps} (same rollout batch)",
                {
                    "per_device_train_batch_size": batch // factor,
                    "gradient_accumulation_steps": accumulation,
                    "steps_per_generation": steps,
                },
            )
        )
        factor *= 2
    return fixes


def candidate_fixes(dominant: str, setup: Setup, allow_lora: bool = True) -> list[Fix]:
    """Changes worth trying, most relevant to `dominant` first, each not already in the setup.
    LoRA changes what is trained, so the planner tries it only when nothing else fits."""
    checkpointing = [Fix("gradient_checkpointing: true", {"gradient_checkpointing": True})]
    sharding = []
    if setup.world_size > 1:
        if setup.strategy == "ddp":
            sharding.append(
                Fix("strategy zero2 (shard gradients and optimizer state)", {"strategy": "zero2"})
            )
        if setup.strategy in ("ddp", "zero2"):
            sharding.append(Fix("strategy zero3 (shard the weights too)", {"strategy": "zero3"}))
    vllm = []
    if setup.colocated_vllm and not setup.vllm_enable_sleep_mode and not setup.max_staleness:
        vllm.append(Fix("vllm_enable_sleep_mode: true", {"vllm_enable_sleep_mode": True}))
    lora = []
    if allow_lora and not setup.lora:
        lora.append(Fix("LoRA r=16 on all linear layers", {"lora": LoraSpec(16, LINEAR_MODULES)}))
    batches = _smaller_batches(setup)
    if setup.gradient_checkpointing:
        checkpointing = []
    if dominant.startswith(("activations", "logits")):
        order = checkpointing + batches + sharding + vllm + lora
    elif dominant.startswith("vLLM"):
        order = vllm + sharding + checkpointing + batches + lora
    elif dominant.startswith(STATE_TERMS):
        order = sharding + lora + checkpointing + vllm + batches
    else:
        order = checkpointing + sharding + vllm + batches + lora
    return order


def vllm_starved(kv_tokens: int, sequence_length: int) -> bool:
    """True when the colocated engine's KV cache cannot hold a single full-length rollout."""
    return kv_tokens < sequence_length


def vllm_utilization_needed(
    weight_bytes: int, overhead_bytes: int, kv_bytes_per_token: int, sequence_length: int, gpu_bytes: int
) -> float:
    """The smallest vllm_gpu_memory_utilization that holds the weights and one full rollout."""
    return (weight_bytes + overhead_bytes + kv_bytes_per_token * sequence_length) / gpu_bytes
