"""`engine.old_logprobs` as a probe: pi_old from vLLM's log-probs of the sampled tokens, no trainer forward.

With `engine.old_logprobs: engine`, GSPOTrainer hands back vLLM's sampling log-probs
(`sampling_per_token_logps`) where TRL 1.16 would recompute pi_old with a no-grad forward: `_generate`
is observed and its log-probs kept for the rollout batch; TRL's pi_old call (the first
trainer-model call inside `_generate_and_score_completions`; the reference model's comes after and
is left alone) returns them, right-padded with 0 as TRL pads them. A batch with a missing (NaN)
log-prob on a scored token falls back to the forward, with a warning.

Refuses a server not started with `--logprobs-mode processed_logprobs` (the ratio assumes
softmax(logits / temperature)); reshaping samplers are refused by
`gspo_trl.config.sections.engine.check_engine_settings`. TRL's vLLM importance-sampling correction
is 1 by construction here and is turned off. `gspo_trl.training.engine.mismatch` measures what
mismatch remains. Docs: docs/engine-logprobs.md.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import torch

from gspo_trl.config.sections.engine import OldLogprobsSettings
from gspo_trl.core.errors import RecipeError, UserError
from gspo_trl.training.engine.mismatch import EngineMismatchGuard, MismatchVerdict
from gspo_trl.training.probes.base import (
    Generation,
    LogprobOutput,
    LossCall,
    NoGradPass,
    PolicyForward,
    Probe,
)

logger = logging.getLogger(__name__)  # the console shows its warnings as `!` alarm lines


class EngineOldLogprobs:
    """Per-trainer state of engine-sourced pi_old: on/off, this rollout batch's log-probs, guard."""

    def __init__(self, trainer: Any, config: OldLogprobsSettings) -> None:
        self.config = config
        self.guard = EngineMismatchGuard(config)
        self.active = config.from_engine and bool(getattr(trainer, "use_vllm", False))
        self.forwards_skipped = 0
        """Rollout batches whose pi_old came from the engine (each one trainer forward saved); with
        dynamic sampling every generation round of a batch counts (each is scored on its own)."""
        self._trl_correction = bool(getattr(trainer, "vllm_importance_sampling_correction", False))
        self._pending = False
        self._sampled: list[list[float | None]] | None = None
        self._warned = False
        self._fall_back: Any = None
        """The trainer, once `on_mismatch: recompute` fired: switch at the next rollout batch."""
        if self.active:
            self._check_server_mode(trainer)
            trainer.use_trl_vllm_correction(False)
            logger.info(
                "engine.old_logprobs: engine: pi_old = vLLM's sampling log-probs (no recompute forward); "
                "TRL's vLLM importance-sampling correction is off (its ratio would be 1)"
            )

    @staticmethod
    def _check_server_mode(trainer: Any) -> None:
        if getattr(trainer, "vllm_mode", None) != "server" or not trainer.accelerator.is_main_process:
            return
        info = trainer.vllm_generation.vllm_client.get_server_info()
        mode = info.get("model_config", {}).get("logprobs_mode")
        if mode != "processed_logprobs":
            raise RecipeError(
                f"engine.old_logprobs: engine: the vLLM server reports logprobs_mode {mode!r}, i.e. "
                "log-probs before temperature; restart it with `--logprobs-mode processed_logprobs` "
                "or use old_logprobs: trainer"
            )

    # --- pi_old substitution ------------------------------------------------------------------
    def begin_rollout(self, training: bool) -> None:
        if self._fall_back is not None:  # not earlier: the current buffer lacks TRL's IS ratios
            self.active = False
            self._fall_back.use_trl_vllm_correction(self._trl_correction)
            self._fall_back = None
        self._pending = self.active and training
        self._sampled = None

    def end_rollout(self) -> None:
        self._pending = False
        self._sampled = None

    def capture(self, sampling_logps: list[list[float | None]] | None) -> None:
        """Keep `_generate`'s per-token sampling log-probs while a rollout batch is scored."""
        if self._pending:
            self._sampled = sampling_logps

    def old_logprobs(self, model: Any, policy: Any, logits_to_keep: int, device: Any) -> torch.Tensor | None:
        """The engine's log-probs in place of TRL's pi_old forward, or None to run the forward."""
        if not self._pending or model is not policy:
            return None
        self._pending = False  # only TRL's first policy call is the pi_old one
        if self._sampled is None:
            return None
        old = torch.zeros(len(self._sampled), logits_to_keep, dtype=torch.float32)
        for row, values in enumerate(self._sampled):
            old[row, : len(values)] = torch.tensor([math.nan if v is None else v for v in values])
        if old.isnan().any():
            logger.warning(
                "engine log-prob missing (NaN) in this rollout batch: pi_old recomputed by the trainer"
            )
            return None
        self.forwards_skipped += 1
        return old.to(device)

    # --- guard ------------------------------------------------------------------------------------
    def observe_on_policy(self, log_s: torch.Tensor) -> None:
        """log s_i of an on-policy micro-batch (trainer minus engine; gathered across ranks)."""
        if self.active:
            self.guard.observe(log_s)

    def finish_on_policy(self, trainer: Any) -> MismatchVerdict | None:
        """Judge the on-policy minibatch, log its metrics and act as `on_mismatch` says."""
        verdict = self.guard.finish(trainer.epsilon_low, trainer.epsilon_high)
        if verdict is None:
            return None
        for key, value in verdict.metrics().items():
            trainer.record_metric(key, value)
        if verdict.problem is None:
            return verdict
        message = (
            f"engine.old_logprobs: engine: vLLM and the trainer disagree on the sampled tokens at step "
            f"{trainer.state.global_step}: {verdict.problem}. Check dtypes and kernels "
            "(docs/engine-logprobs.md), or measure with `gspo-trl check-logprobs`"
        )
        if self.config.on_mismatch == "stop":
            raise UserError(
                message + "; stopping (engine.on_mismatch: stop). Use engine.old_logprobs: trainer."
            )
        if self.config.on_mismatch == "recompute":
            self._fall_back = trainer
            logger.warning("%s; pi_old is recomputed by the trainer from the next rollout batch on", message)
        elif not self._warned:
            logger.warning("%s (engine.on_mismatch: warn; warned once)", message)
            self._warned = True
        return verdict


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

    alarm_loggers = (__name__,)  # the mismatch guard

    def __init__(self, config: OldLogprobsSettings) -> None:
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
