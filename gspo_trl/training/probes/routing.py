"""Mixture-of-experts routing as a probe (`moe:` section; gspo_trl.training.routing holds the
logic, docs/moe.md the why): record pi_old's experts in its no-grad pass and put them in the
rollout batch, compare (or, with replay, force) them in each update, log the flip rates."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch

from gspo_trl.config.batch import RolloutBatch
from gspo_trl.config.sections import DiagnosticsConfig, MoeConfig
from gspo_trl.training.probes.base import Generation, LogprobOutput, LossCall, NoGradPass, Probe
from gspo_trl.training.reporting.line_parts import BANNER_RUN, LinePart
from gspo_trl.training.reporting.moe_lines import flips_part, moe_banner_line
from gspo_trl.training.rollout_rows import Layout
from gspo_trl.training.routing import ROUTED_EXPERTS, MoeRouting, RoutingAlarm, engine_routing_returned


def stop_router_logits_in_generate(model: Any) -> None:
    """Turn off a mixture-of-experts config's `output_router_logits`, which TRL's SFTTrainer saves
    on (`text_config.output_router_logits = self.aux_loss_enabled`, trl/trainer/sft_trainer.py:1210):
    with it on, every forward of `generate` computes the load-balancing loss of the new token's
    router logits against the whole attention mask and fails with 'The size of tensor a (32) must
    match the size of tensor b (384)' (`flat_mask.repeat_interleave(top_k)`,
    transformers/models/qwen3_moe/modeling_qwen3_moe.py:572).
    The aux loss stays: TRL asks for router logits per call (`model_inputs["output_router_logits"]
    = True` under `compute_aux_loss`, trl/trainer/grpo_trainer.py:1492) and decides it from the
    attribute's presence, not its value (`hasattr(text_config, "output_router_logits")`,
    grpo_trainer.py:832)."""
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text_config, "output_router_logits", False):
        text_config.output_router_logits = False


class RoutingProbe(Probe):
    """MoeRouting wired to the trainer's events; inert for a dense model."""

    alarm_loggers = (RoutingAlarm.__module__,)
    rollout_layouts: ClassVar[dict[str, Layout]] = {ROUTED_EXPERTS: Layout(2, "sequence")}  # (B, L, P+C, k)

    def __init__(self, config: MoeConfig, diagnostics: DiagnosticsConfig) -> None:
        self.config, self.diagnostics = config, diagnostics
        self.routing: MoeRouting | None = None

    def trainer_init(self) -> contextlib.AbstractContextManager[None]:
        """Around GRPOTrainer's construction: routing_replay: engine builds TRL's vLLM to return
        the experts it routes to."""
        return engine_routing_returned(self.config)

    def attach(self, trainer: Any) -> None:
        stop_router_logits_in_generate(trainer.model)
        on_policy = RolloutBatch.from_grpo_config(trainer.args).on_policy
        self.routing = MoeRouting(
            trainer.model, self.config, self.diagnostics, trainer.accelerator, on_policy
        )

    def banner_lines(self, trainer: Any) -> list[LinePart]:
        line = moe_banner_line(self.routing)
        return [LinePart(BANNER_RUN + 10, line)] if line else []

    def step_line_parts(self, logs: Mapping[str, Any]) -> list[LinePart]:
        flips = flips_part(logs)  # under replay: what the router would choose vs the replayed experts
        return [LinePart(50, flips)] if flips else []

    def on_rollout_begin(self, trainer: Any, training: bool) -> None:
        self.routing.begin_rollout(training)

    def on_generation(self, trainer: Any, generation: Generation) -> None:
        if generation.training:
            self.routing.take_engine_routing(trainer, generation.prompt_ids, generation.completion_ids)

    def around_no_grad_pass(
        self, trainer: Any, call: NoGradPass, proceed: Callable[[], LogprobOutput]
    ) -> LogprobOutput:
        if call.answer is not None:  # pi_old without a forward (engine log-probs)
            self.routing.skip_old_forward(call.attention_mask, call.logits_to_keep)
            return proceed()
        with self.routing.old_forward(call.attention_mask, call.logits_to_keep):  # recorded or replayed
            return proceed()

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        return self.routing.attach(batch)

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        if loss.training:
            self.routing.begin_update(loss.batch)

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        if loss.training:
            self.routing.observe_update(loss.batch, loss.minibatch)

    def on_training_step_end(self, trainer: Any) -> None:
        """After the backward, which reruns the forward under gradient checkpointing."""
        self.routing.end_update()

    def on_log(self, trainer: Any, logs: Mapping[str, Any]) -> dict[str, float]:
        if not trainer.model.training:
            return {}
        return self.routing.statistics(trainer.accelerator.is_main_process)
