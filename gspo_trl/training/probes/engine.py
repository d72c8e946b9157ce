"""Engine log-probs as pi_old, and the mismatch guard, as a probe (`engine:` section;
gspo_trl.training.engine.logprobs and .mismatch hold the logic, docs/engine-logprobs.md the why).

It keeps `_generate`'s sampled-token log-probs for the rollout batch, answers TRL's pi_old pass
with them (no forward), and judges the on-policy minibatch's log s_i (trainer minus engine)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.engine.logprobs import EngineOldLogprobs
from gspo_trl.training.probes.base import (
    Generation,
    LogprobOutput,
    LossCall,
    NoGradPass,
    PolicyForward,
    Probe,
)

logger = logging.getLogger(__name__)


def vllm_correction_summary(args: Any) -> str:
    """One line naming TRL's vLLM importance-sampling correction as this run applies it."""
    if not args.vllm_importance_sampling_correction:
        return (
            "vLLM importance-sampling correction: off (vllm_importance_sampling_correction: false; "
            "the GSPO default, see docs/vllm.md); measure the engine/trainer gap with gspo-trl check-logprobs"
        )
    low = args.vllm_importance_sampling_clip_min
    return (
        f"vLLM importance-sampling correction: on, mode {args.vllm_importance_sampling_mode}, ratios "
        f"outside [{low if low is not None else '-inf'}, {args.vllm_importance_sampling_clip_max}] "
        "truncated or masked; it reweights the GSPO loss (sampling/importance_sampling_ratio/*)"
    )


class EngineLogprobsProbe(Probe):
    """pi_old from the engine (when `config.from_engine` and the run uses vLLM) and its guard."""

    alarm_loggers = (EngineOldLogprobs.__module__,)  # the mismatch guard

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.engine: EngineOldLogprobs | None = None
        self._log_s: torch.Tensor | None = None

    def attach(self, trainer: Any) -> None:
        self.engine = EngineOldLogprobs(trainer, self.config)
        if trainer.use_vllm and trainer.accelerator.is_main_process:
            logger.info(vllm_correction_summary(trainer.args))

    def around_rollout(
        self, trainer: Any, prompts: list[Any], proceed: Callable[[list[Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        try:
            return proceed(prompts)
        finally:
            self.engine.end_rollout()

    def on_rollout_begin(self, trainer: Any, training: bool) -> None:
        self.engine.begin_rollout(training)

    def on_generation(self, trainer: Any, generation: Generation) -> None:
        self.engine.capture(generation.sampling_logprobs)

    def answer_no_grad_pass(self, trainer: Any, call: NoGradPass) -> LogprobOutput | None:
        if not self.engine.active:
            return None
        device = trainer.accelerator.device
        old = self.engine.old_logprobs(call.model, trainer.model, call.logits_to_keep, device)
        return None if old is None else (old, None, None)

    def on_policy_forward(self, trainer: Any, policy: PolicyForward) -> None:
        self._log_s = policy.log_s if policy.loss.training else None

    def on_loss(self, trainer: Any, loss: LossCall, value: torch.Tensor) -> None:
        """On the on-policy minibatch, log s_i is trainer minus engine: feed it to the guard and
        judge once its last micro-batch is in."""
        log_s, self._log_s = self._log_s, None
        if not self.engine.active or log_s is None or loss.minibatch != 1:
            return
        log_s = log_s.float()
        accelerator = trainer.accelerator
        if accelerator.num_processes > 1:
            log_s = accelerator.gather(accelerator.pad_across_processes(log_s, dim=0, pad_index=float("nan")))
        self.engine.observe_on_policy(log_s)
        if loss.last_micro_batch:
            self.engine.finish_on_policy(trainer)
