"""GSPOTrainer: TRL's GRPOTrainer with GSPO diagnostics and GSPO-token; the loss stays TRL's.

GSPO itself is TRL configuration (`importance_sampling_level="sequence"`, `loss_type="grpo"`,
beta 0, eps 3e-4/4e-4, 4 updates per rollout batch). This subclass adds four things and
never re-implements the loss:

- Diagnostics (see `gspo_trl.training.diagnostics` for the metric keys). TRL computes the policy
  log-probs inside `_compute_loss`; we observe them on their way out of
  `_get_per_token_logps_and_entropies`, derive log s_i from the same tensors TRL uses, and
  gather one small row per response across ranks. No extra forward pass, no recomputed
  entropy.
- Checkpoints written whole or not at all (gspo_trl.training.safety.staged_checkpoints).
- Phase timings, tokens/s, MFU (`perf/*`, gspo_trl.training.reporting.phases), at the TRL calls quoted below.
- GSPO-token (`GSPOConfig(gspo_token=True)`, with `importance_sampling_level="token"`). TRL reads
  `inputs["old_per_token_logps"]` after computing `per_token_logps`; we set it to
  `per_token_logps.detach() - sg[log s_i]`, so TRL's own token ratio becomes
  exp(sg[log s_i] + logp_it - sg[logp_it]): every token carries the value (and clip
  decision) of s_i, while the gradient flows through each token's log-prob with its own
  advantage A_it. The rewrite happens on a copy of the minibatch, so reused buffers
  (num_iterations > 1) keep the true old log-probs.

With `engine={"old_logprobs": "engine"}` (recipe `engine:` section), pi_old is vLLM's sampling
log-probs instead of TRL's recompute forward, and the on-policy minibatch's log s_i is judged
as the engine mismatch on every rollout batch (gspo_trl.training.engine.logprobs, .mismatch).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import torch
from trl import GRPOTrainer

import gspo_trl.metric_names as names
from gspo_trl.config.batch import RolloutBatch
from gspo_trl.config.invariants import algorithm_of, check_ratio_level
from gspo_trl.config.sections import DiagnosticsConfig, EngineConfig, MoeConfig
from gspo_trl.training.diagnostics import (
    ClipAlarm,
    PolicyPass,
    response_rows,
    sequence_log_ratio,
    summarize_rows,
)
from gspo_trl.training.engine.behaviour import BehaviourCorrection, trl_loss_weight
from gspo_trl.training.engine.logprobs import EngineOldLogprobs
from gspo_trl.training.reporting.console import close_consoles
from gspo_trl.training.reporting.phases import PerfMeter, UpdatePhaseCallback, trainer_model_shape
from gspo_trl.training.routing import MoeRouting, engine_routing_returned
from gspo_trl.training.safety.staged_checkpoints import StagedCheckpoints

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


def stop_router_logits_in_generate(model: Any) -> None:
    """Turn off a mixture-of-experts config's `output_router_logits`, which TRL's SFTTrainer saves
    on (`text_config.output_router_logits = self.aux_loss_enabled`, trl/trainer/sft_trainer.py:1210):
    with it on, every forward of `generate` computes the load-balancing loss of the new token's
    router logits against the whole attention mask and fails ("The size of tensor a (32) must
    match the size of tensor b (384)", transformers/models/qwen3_moe/modeling_qwen3_moe.py:573).
    The aux loss stays: TRL asks for router logits per call (`model_inputs["output_router_logits"]
    = True` under `compute_aux_loss`, grpo_trainer.py:1492) and decides it from the attribute's
    presence, not its value (`hasattr(text_config, "output_router_logits")`, grpo_trainer.py:832)."""
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text_config, "output_router_logits", False):
        text_config.output_router_logits = False


class GSPOTrainer(StagedCheckpoints, GRPOTrainer):
    """GRPOTrainer plus GSPO diagnostics and GSPO-token; every argument is TRL's.

    Give it a `GSPOConfig` (gspo_trl.training.config): its `gspo_token` and `diagnostics`
    fields switch GSPO-token and configure the diagnostics. A plain `GRPOConfig` works too
    (no GSPO-token, default diagnostics), but carries TRL's defaults, not GSPO's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._gspo_loss_inputs: dict[str, Any] | None = None
        self._gspo_captured: dict[str, torch.Tensor] = {}
        self._gspo_rows: dict[int, list[torch.Tensor]] = defaultdict(list)
        self.gspo_row_sink: list[tuple[int, torch.Tensor]] | None = None
        """Set to a list to also keep every gathered (minibatch index, rows) pair (calibrate)."""
        trainer_args = kwargs.get("args", args[2] if len(args) > 2 else None)
        with engine_routing_returned(trainer_args):  # routing_replay: engine builds TRL's vLLM for it
            super().__init__(*args, **kwargs)
        stop_router_logits_in_generate(self.model)
        self.gspo_token = bool(getattr(self.args, "gspo_token", False))
        config = getattr(self.args, "diagnostics_config", None)
        self.diagnostics = config() if callable(config) else DiagnosticsConfig()
        self._gspo_alarm = ClipAlarm(self.diagnostics)
        engine = getattr(self.args, "engine_config", None)
        engine_config = engine() if callable(engine) else EngineConfig()
        self.engine_logprobs = EngineOldLogprobs(self, engine_config)
        self.behaviour = BehaviourCorrection(
            engine_config, self.diagnostics.length_buckets, self._gather_rows
        )
        if self.behaviour.active:
            logger.info("engine.correction: %s", self.behaviour.describe())
        moe = getattr(self.args, "moe_config", None)
        moe_config = moe() if callable(moe) else MoeConfig()
        on_policy = RolloutBatch.from_grpo_config(self.args).on_policy
        self.routing = MoeRouting(self.model, moe_config, self.diagnostics, self.accelerator, on_policy)
        if self.use_vllm and self.accelerator.is_main_process:
            logger.info(vllm_correction_summary(self.args))
        self.perf = PerfMeter(
            self.accelerator.device, trainer_model_shape(self.model), bool(self.args.gradient_checkpointing)
        )
        self.add_callback(UpdatePhaseCallback(self.perf.timer))
        if self.use_vllm:
            self._time_weight_sync()
        # a GSPOConfig checked this when built; again here for one changed since (the same check)
        level = self.importance_sampling_level
        check_ratio_level(algorithm_of(level, self.gspo_token), level)

    # --- loss path -------------------------------------------------------------------------
    def train(self, *args: Any, **kwargs: Any) -> Any:
        """TRL's train; the console lets go of the alarm loggers even when training raises
        (transformers calls on_train_end only on success), so a later run in the same process
        (a notebook, a sweep) gets its own alarms."""
        self.perf.timer.reset()
        self.perf.timer.start(names.PHASE_SETUP)  # until on_train_begin (UpdatePhaseCallback)
        try:
            return super().train(*args, **kwargs)
        finally:
            close_consoles(self)

    # --- phase timings (gspo_trl.training.reporting.phases) --------------------------------------
    def _time_weight_sync(self) -> None:
        """`weight_sync`: TRL's `_generate`/`_generate_single_turn` run `if self.state.global_step !=
        self._last_loaded_step: ... self.vllm_generation.sync_weights()`, inside `generation`."""
        generation = self.vllm_generation

        def timed_sync(*args: Any, **kwargs: Any) -> Any:
            # The class's method, looked up at each call: a sync patched onto the class after
            # the trainer was built (gspo_trl.model.vllm_cpu's shim, a user's) is the one timed.
            with self.perf.timer.phase(names.PHASE_WEIGHT_SYNC):
                return type(generation).sync_weights(generation, *args, **kwargs)

        generation.sync_weights = timed_sync

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """`rewards`: `rewards_per_func = self._calculate_rewards(inputs, prompts, completions, ...)`."""
        with self.perf.timer.phase(names.PHASE_REWARDS):
            return super()._calculate_rewards(*args, **kwargs)

    def _evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """`heldout`: the Trainer's eval pass (the held-out callback times its own)."""
        with self.perf.timer.phase(names.PHASE_HELDOUT):
            return super()._evaluate(*args, **kwargs)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        with self.perf.timer.phase(names.PHASE_CHECKPOINT):
            super()._save_checkpoint(model, trial)

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """TRL's step (loss forward, then backward); the update's routing pass ends after the
        backward, which reruns the forward under gradient checkpointing (gspo_trl.training.routing)."""
        try:
            return super().training_step(*args, **kwargs)
        finally:
            self.routing.end_update()

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        if self.model.training:
            self.perf.count_update(inputs)
            self.routing.begin_update(inputs)
        self._gspo_loss_inputs = dict(inputs)  # a copy: GSPO-token rewrites old log-probs in it
        self._gspo_captured = {}
        weighs = self.behaviour.active and self.model.training
        try:
            with trl_loss_weight(self, weighs):  # the weight _policy_logprobs puts in the copy
                loss = super()._compute_loss(model, self._gspo_loss_inputs)
        finally:
            self._gspo_loss_inputs = None
        if weighs and self._step % self._generate_every() == self._generate_every() - 1:
            for key, value in self.behaviour.finish_rollout().items():  # the rollout batch's last update
                self._metrics["train"][key].append(value)
        if self.model.training:
            self.routing.observe_update(inputs, self._minibatch_index())
        if self.diagnostics.enabled and self.model.training and self._gspo_captured:
            self._record_rows(inputs)
        if self.engine_logprobs.active and self.model.training and self._gspo_captured:
            self._judge_engine_mismatch()
        self._gspo_captured = {}
        return loss

    # --- engine log-probs as pi_old (gspo_trl.training.engine.logprobs) -------------------------
    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        self.engine_logprobs.begin_rollout(self.model.training)
        self.routing.begin_rollout(self.model.training)
        try:
            rollout = self.routing.attach(super()._generate_and_score_completions(inputs))
        finally:
            self.engine_logprobs.end_rollout()
        if self.behaviour.active and self.model.training:
            mask = rollout["completion_mask"] * rollout.get("tool_mask", 1)
            self.behaviour.calibrate_rollout(
                rollout.get("old_per_token_logps"), rollout.get("sampling_per_token_logps"), mask
            )
        return rollout

    def _generate(self, prompts: list) -> tuple:
        """`generation`: `prompt_ids, completion_ids, ... = self._generate(prompts)` in TRL's
        `_generate_and_score_completions`; the completion ids are counted as generated tokens."""
        with self.perf.timer.phase(names.PHASE_GENERATION):
            result = super()._generate(prompts)
        if self.model.training:
            self.perf.count_generated(result[1])  # the completion ids, one list per completion
            self.routing.take_engine_routing(self, result[0], result[1])
        self.engine_logprobs.capture(result[4])  # the sampled tokens' log-probs
        return result

    def _judge_engine_mismatch(self) -> None:
        """On the on-policy minibatch, log s_i is trainer minus engine: feed it to the guard."""
        if self._minibatch_index() != 1:
            return
        log_s = self._gspo_captured["log_s"].float()
        if self.accelerator.num_processes > 1:
            log_s = self.accelerator.gather(
                self.accelerator.pad_across_processes(log_s, dim=0, pad_index=float("nan"))
            )
        self.engine_logprobs.observe_on_policy(log_s)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == self.args.gradient_accumulation_steps - 1:
            self.engine_logprobs.finish_on_policy(self)

    def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any):
        """`old_logprobs`: the no-grad calls in `_generate_and_score_completions` (`old_per_token_logps,
        _, _ = self._get_per_token_logps_and_entropies(...)`, and the reference model's at beta > 0);
        0 s in engine mode. The loss's call (inside `update`) is the policy pass."""
        if self._gspo_loss_inputs is not None:
            return self._policy_logprobs(model, *args, **kwargs)
        if not self.model.training:
            return self._no_grad_logprobs(model, *args, **kwargs)
        with self.perf.timer.phase(names.PHASE_OLD_LOGPROBS):  # pi_old (and the reference model)
            return self._no_grad_logprobs(model, *args, **kwargs)

    def _no_grad_logprobs(self, model: Any, *args: Any, **kwargs: Any):
        """A pass outside the loss (old / reference log-probs): the engine's, or TRL's forward."""
        width = kwargs.get("logits_to_keep", args[2] if len(args) > 2 else None)
        attention_mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        if self.engine_logprobs.active:
            old = self.engine_logprobs.old_logprobs(model, self.model, width, self.accelerator.device)
            if old is not None:  # TRL's pi_old call, answered by the engine: no forward
                self.routing.skip_old_forward(attention_mask, width)
                return old, None, None
        with self.routing.old_forward(attention_mask, width):  # pi_old's routing: recorded or replayed
            return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)

    def _policy_logprobs(self, model: Any, *args: Any, **kwargs: Any):
        """The loss's policy pass: TRL's forward, observed for the diagnostics and GSPO-token."""
        logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        inputs = self._gspo_loss_inputs
        self._gspo_loss_inputs = None  # only the first call inside _compute_loss is the policy pass
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        new = logps.detach()
        log_s = sequence_log_ratio(new, new if old is None else old, mask)
        if self.behaviour.active and self.model.training:  # engine.correction's weight, per response
            pi = new if self.engine_logprobs.active or old is None else old
            inputs["importance_sampling_ratio"] = self.behaviour.weigh(
                pi, inputs.get("sampling_per_token_logps"), mask
            )
        if self.gspo_token:
            inputs["old_per_token_logps"] = new - log_s.unsqueeze(-1)
        self._gspo_captured = {"log_s": log_s, "mask": mask}
        if entropies is not None:
            self._gspo_captured["entropies"] = entropies.detach()
        return logps, entropies, aux_loss

    def _gather_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's rows (NaN-padded: ranks may hold different batch sizes)."""
        if self.accelerator.num_processes == 1:
            return rows
        rows = rows.to(self.accelerator.device)
        return self.accelerator.gather(
            self.accelerator.pad_across_processes(rows, dim=0, pad_index=float("nan"))
        ).cpu()

    # --- diagnostics ------------------------------------------------------------------------
    def _generate_every(self) -> int:
        """Micro-steps per rollout batch (TRL's `generate_every`)."""
        return self.args.steps_per_generation * self.num_iterations

    def _minibatch_index(self) -> int:
        """1-based index of this update within its rollout batch (1 = on-policy)."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        return (self._step % generate_every) // self.args.gradient_accumulation_steps + 1

    def _record_rows(self, inputs: dict[str, Any]) -> None:
        cap = self._gspo_captured
        policy_pass = PolicyPass(
            log_s=cap["log_s"],
            scored_mask=cap["mask"],
            completion_mask=inputs["completion_mask"],
            advantages=inputs["advantages"],
            entropies=cap.get("entropies"),
        )
        rows = response_rows(policy_pass)
        if self.accelerator.num_processes > 1:  # ranks may hold different batch sizes: pad, then gather
            rows = self.accelerator.gather(self.accelerator.pad_across_processes(rows, dim=0, pad_index=0))
        self._gspo_rows[self._minibatch_index()].append(rows.detach())

    def gspo_statistics(self) -> dict[str, float]:
        """Turn the rows recorded since the last log into `gspo/*` metrics and clear them."""
        eps = (self.epsilon_low, self.epsilon_high, self.diagnostics.length_buckets)
        out: dict[str, float] = {}
        offpolicy: list[tuple[torch.Tensor, dict[str, float]]] = []
        for mb in sorted(self._gspo_rows):
            rows = torch.cat(self._gspo_rows[mb]).cpu()
            if self.gspo_row_sink is not None:
                self.gspo_row_sink.append((mb, rows))
            stats = summarize_rows(rows, *eps)
            out.update({names.under(names.minibatch(mb), k): v for k, v in stats.items()})
            if mb >= 2:
                offpolicy.append((rows, stats))
        self._gspo_rows.clear()
        if offpolicy:  # usually one off-policy minibatch per logging step: reuse its numbers
            pooled = (
                offpolicy[0][1]
                if len(offpolicy) == 1
                else summarize_rows(torch.cat([r for r, _ in offpolicy]), *eps)
            )
            out.update({names.under(names.OFFPOLICY, k): v for k, v in pooled.items()})
            if self.accelerator.is_main_process:
                self._gspo_alarm.update(pooled, self.epsilon_low, self.epsilon_high)
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.model.training:
            zero_std = [v for v in self._metrics["train"].get(names.TRL_ZERO_VARIANCE, []) if v == v]
            if zero_std:
                logs[names.ZERO_VARIANCE_GROUPS] = sum(zero_std) / len(zero_std)
            if self._gspo_rows:
                logs.update(self.gspo_statistics())
            logs.update(self.routing.statistics(self.accelerator.is_main_process))
            if "loss" in logs:  # a training log event: one perf window
                logs.update(self.perf.logs(self.accelerator))
        if "train_runtime" in logs:  # the end-of-training summary: the run's sums
            self.perf.timer.window()
            logs.update(self.perf.totals())
        super().log(logs, start_time)
