"""`engine.sampling_masks: replay` as a probe: put the engine's log-probs back on the trainer's scale.

Under top_p/top_k/min_p vLLM's log-prob of a sampled token is of the filtered distribution,
log mu_t = log mu_plain_t - log S_t (gspo_trl.training.engine.sampling_filter). At the end of
each training rollout batch one no-grad forward of pi_old's weights replays the filter and gives
log S_t per completion token; then, in TRL's rollout dict, `sampling_per_token_logps` (and
`old_per_token_logps` when it is the engine's) get log S_t added, so the GSPO ratio, the engine
guard and the correction compare log-probs over one vocabulary. `sampling_log_kept_mass` keeps
log S_t per token (B, C), a row key TRL shuffles and splits with the rest.
The probe goes after EngineLogprobsProbe and before CorrectionProbe. It costs a forward with full
logits per rollout batch. What is exact and what is not (the s_i ratio off-policy), and the times:
docs/engine-logprobs.md ("Top-p, top-k and min-p").
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.config.sections.engine_sampler import SamplingMaskSettings
from gspo_trl.training.engine.sampling_filter import SamplerFilter, log_kept_mass
from gspo_trl.training.probes.base import Probe
from gspo_trl.training.probes.correction import CorrectionProbe
from gspo_trl.training.probes.old_logprobs import EngineLogprobsProbe
from gspo_trl.training.rollout_rows import Layout

logger = logging.getLogger(__name__)


SAMPLING_LOG_KEPT_MASS = "sampling_log_kept_mass"
"""The rollout dict's key for log S_t, (B, C) nats, 0 on padding."""

LOGITS_BUDGET = 2**26
"""Logits held at once by the replay's forward (256 MiB in fp32): as many rows per call as fit,
at least one; the tiny model's rollout batch is one call, a 150k vocabulary at C = 1024 one row."""


class SamplingMaskReplay:
    """One run's replay: active with `engine.sampling_masks: replay` under a reshaping sampler."""

    def __init__(self, trainer: Any, config: SamplingMaskSettings) -> None:
        self.sampler = SamplerFilter.from_settings(vars(trainer.args))
        use_vllm = bool(getattr(trainer, "use_vllm", False))
        self.active = config.sampling_masks == "replay" and self.sampler.active and use_vllm
        self.temperature = float(trainer.temperature)
        self.rollouts = 0

    def describe(self) -> str:
        return (
            f"replay of the sampler's filter ({self.sampler}) on the trainer's logits; engine log-probs "
            "renormalised by the kept mass log S_t"
        )

    @torch.no_grad()
    def kept_mass(self, trainer: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(log S_t, sampled token outside the trainer's kept set), each (B, C), from the trainer's
        current weights; 0 / False on padding."""
        prompt_ids, completion_ids = batch["prompt_ids"], batch["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        width = completion_ids.shape[1]
        # the config's, not the output embedding's rows: under ZeRO-3 those are a 0-row placeholder
        # outside a forward (deepspeed/runtime/zero/partition_parameters.py:329), and divided by zero;
        # the text config's, which is the config itself for a text-only model
        vocabulary = trainer.model.config.get_text_config().vocab_size
        step = max(1, LOGITS_BUDGET // ((width + 1) * vocabulary))
        masses, outside = [], []
        for start in range(0, input_ids.shape[0], step):
            rows = slice(start, start + step)
            with trainer.accelerator.autocast():
                logits = trainer.model(
                    input_ids=input_ids[rows], attention_mask=attention_mask[rows], logits_to_keep=width + 1
                ).logits
            scaled = logits[:, :-1].float() / self.temperature  # position P - 1 + j scores token j
            tokens = completion_ids[rows]
            kept = log_kept_mass(scaled.reshape(-1, scaled.shape[-1]), tokens.reshape(-1), self.sampler)
            masses.append(kept.log_mass.view(tokens.shape))
            outside.append(kept.sampled_outside.view(tokens.shape))
        scored = batch["completion_mask"].bool()
        return torch.cat(masses) * scored, torch.cat(outside) & scored

    def apply(self, trainer: Any, batch: dict[str, Any], pi_old_from_engine: bool) -> dict[str, Any]:
        """Renormalise this training rollout batch's engine log-probs (see the module docstring) and
        log gspo/sampling_masks/*."""
        mu = batch.get("sampling_per_token_logps")
        if mu is None:
            raise RuntimeError(
                "engine.sampling_masks: replay: TRL's rollout batch has no sampling_per_token_logps "
                "(vLLM returned no log-probs) to renormalise"
            )
        log_mass, outside = self.kept_mass(trainer, batch)
        log_mass = log_mass.to(mu.dtype)
        batch[SAMPLING_LOG_KEPT_MASS] = log_mass
        batch["sampling_per_token_logps"] = mu + log_mass
        old = batch.get("old_per_token_logps")
        if pi_old_from_engine and old is not None:
            batch["old_per_token_logps"] = old + log_mass.to(old.dtype)
        for key, value in replay_metrics(log_mass, outside, batch["completion_mask"]).items():
            trainer.record_metric(key, value)
        self.rollouts += 1
        return batch


def replay_metrics(log_mass: torch.Tensor, outside: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """gspo/sampling_masks/kept_mass (mean S_t) and /sampled_outside (share) over the scored tokens."""
    scored = mask.bool()
    tokens = max(int(scored.sum()), 1)
    return {
        names.SAMPLING_KEPT_MASS: float(log_mass.double().exp()[scored].sum()) / tokens,
        names.SAMPLING_OUTSIDE: float(outside[scored].sum()) / tokens,
    }


class SamplingMaskProbe(Probe):
    """The sampling-mask replay of a run (inert unless `engine.sampling_masks: replay`)."""

    rollout_layouts: ClassVar[dict[str, Layout]] = {SAMPLING_LOG_KEPT_MASS: Layout(1, "completion")}
    runs_after = (EngineLogprobsProbe,)  # its answer says whether pi_old is the engine's
    runs_before = (CorrectionProbe,)  # whose `auto` calibration reads the batch at its end

    def __init__(self, config: SamplingMaskSettings) -> None:
        self.config = config
        self.replay: SamplingMaskReplay | None = None
        self._engine_answers = 0

    def attach(self, trainer: Any) -> None:
        self.replay = SamplingMaskReplay(trainer, self.config)
        if self.replay.active:
            logger.info("engine.sampling_masks: %s", self.replay.describe())

    def _answered(self, trainer: Any) -> int:
        engine = trainer.probes.find(EngineLogprobsProbe)
        return engine.engine.forwards_skipped if engine is not None and engine.engine is not None else 0

    def on_rollout_begin(self, trainer: Any, training: bool) -> None:
        self._engine_answers = self._answered(trainer)

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        if not (self.replay.active and trainer.model.training):
            return batch
        from_engine = self._answered(trainer) > self._engine_answers
        return self.replay.apply(trainer, batch, from_engine)
