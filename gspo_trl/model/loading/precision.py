"""The dtype the trainable weights are loaded in: one rule for `gspo-trl train` and `gspo-trl plan`.

torch's AdamW adds its ~lr-sized step (1e-6) straight onto the weights; on bf16 weights
(spacing ~1e-4 at magnitude 0.02) that rounds away for all but ~2% of them
(scripts/bench_bf16_updates.py: 1.95% vs 100% of weights changed). So bfloat16 weights are
loaded as float32 unless something else keeps fp32 master weights: DeepSpeed does (its fp32
partitions), LoRA trains fp32 adapters over a frozen base (PEFT upcasts them), and
`model.allow_pure_bf16: true` keeps bf16 on purpose. The forward pass stays bf16 through
autocast (`bf16: true`).
"""

from __future__ import annotations

from dataclasses import dataclass

UPCAST_TO = "float32"


@dataclass(frozen=True)
class WeightPrecision:
    """`load_dtype`: what the weights are loaded (and trained) in; `upcast`: True when a
    bfloat16 request became float32 by the rule above."""

    load_dtype: str
    upcast: bool


def training_weight_precision(
    dtype: str | None, deepspeed: bool, lora: bool, allow_pure_bf16: bool = False
) -> WeightPrecision:
    """The load dtype for a requested `dtype` (None or `auto`: the checkpoint's, left alone)."""
    name = str(dtype).removeprefix("torch.") if dtype is not None else "auto"
    if name != "bfloat16" or allow_pure_bf16 or deepspeed or lora:
        return WeightPrecision(name, upcast=False)
    return WeightPrecision(UPCAST_TO, upcast=True)


def cpu_mixed_precision(
    bf16: bool | None, use_cpu: bool | None, gpu_available: bool
) -> tuple[bool | None, bool]:
    """(bf16, use_cpu) for a config, one rule for `GSPOConfig(...)` and a recipe (whose unset
    keys reach GSPOConfig as None). On a machine without a GPU, `use_cpu` left unset becomes
    True: transformers refuses `bf16` there otherwise ("Your setup doesn't support bf16/gpu",
    transformers/training_args.py:1747). `bf16` left unset stays TRL's default on a GPU
    (`self.bf16 = not (self.fp16) if self.bf16 is None else self.bf16`, trl/trainer/base_config.py:108)
    and becomes False for a CPU run: bf16 autocast on CPU is slow and
    not what a CPU run wants. An explicit `bf16: true` on CPU is kept (autocast on CPU)."""
    on_cpu = bool(use_cpu) or not gpu_available
    if use_cpu is None:
        use_cpu = not gpu_available
    if bf16 is None and on_cpu:
        bf16 = False
    return bf16, use_cpu
