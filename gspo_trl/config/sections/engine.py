"""The `engine:` section: where pi_old comes from, and when the inference engine's log-probs may
stand in for it (docs/engine-logprobs.md says when this is safe). The dataclass refuses bad values
when built; `check_engine_settings` checks it against the run's other settings. Shared by recipes
(gspo_trl.config.validation) and `GSPOConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gspo_trl.config.sections.engine_correction import CorrectionSettings, check_correction_settings
from gspo_trl.config.sections.engine_overlap import (
    OverlapSettings,
    check_overlap_settings,
    check_overlap_value,
)
from gspo_trl.config.sections.engine_sampler import SamplingMaskSettings, check_sampler_settings
from gspo_trl.config.sections.engine_staleness import StalenessSettings, check_staleness_settings
from gspo_trl.core.errors import RecipeError

OLD_LOGPROBS_SOURCES = ("trainer", "engine")
ON_MISMATCH_ACTIONS = ("warn", "recompute", "stop")

MAX_STALENESS = 16
"""The deepest `max_staleness` accepted: asynchronous pipelines run 1-4 rollout batches deep
(docs/async.md measured d 0-4); a deeper schedule barely syncs (1e9: never), so the run would
train on rollouts of a policy the clip range no longer reaches."""

MAX_BIAS_FRACTION = 0.25
"""Engine mismatch verdict (the run's guard and `gspo-trl check-logprobs` alike): the largest
|mean log s_i| on the on-policy minibatch, as a fraction of the narrower clip half-range; past a
quarter a bias starts to decide which advantage sign is clipped first (docs/engine-logprobs.md,
"Why these limits")."""

MAX_OUTSIDE_CLIP = 0.05
"""Engine mismatch verdict: the largest fraction of on-policy responses the mismatch alone may put
outside the clip range (they lose their gradient before the policy has moved); small next to the
15-25% of off-policy responses the clip is meant to act on (docs/engine-logprobs.md)."""


@dataclass(frozen=True)
class OldLogprobsSettings:
    """What EngineLogprobsProbe and its mismatch guard read (`EngineConfig.old_logprobs_settings()`)."""

    old_logprobs: str
    on_mismatch: str
    max_bias_fraction: float
    max_outside_clip: float

    @property
    def from_engine(self) -> bool:
        """True when pi_old is the engine's log-probs."""
        return self.old_logprobs == "engine"


@dataclass
class EngineConfig:
    """Recipe `engine:` section: where pi_old comes from, and the guard on that choice.

    old_logprobs: `trainer` (TRL's default: one extra no-grad forward per rollout batch
        recomputes the sampled tokens' log-probs) or `engine` (use the log-probs vLLM returned
        while sampling; needs use_vllm, saves that forward). See docs/engine-logprobs.md.
    on_mismatch: what the guard does when the first (on-policy) minibatch shows the engine
        scoring tokens unlike the trainer: `warn` (log once), `recompute` (switch to trainer
        log-probs from the next rollout batch on) or `stop` (end the run with a message).
    max_bias_fraction: flag when |mean log s_i| on the on-policy minibatch exceeds this
        fraction of the narrower clip half-range, min(log(1 + eps_high), -log(1 - eps_low)).
    max_outside_clip: flag when more than this fraction (0-1) of the on-policy minibatch's
        responses fall outside the clip range from the mismatch alone.

    The correction (off by default; gspo_trl.training.probes.correction, checked by
    gspo_trl.config.sections.engine_correction, docs/engine-logprobs.md "Correcting the mismatch"):
    correction: `off`, `truncate` (weight each response's loss by min(w_i, weight_max), w_i =
        exp(mean_t(log pi_old - log mu)) over its tokens) or `reject` (weight w_i inside
        [weight_min, weight_max], 0 outside). With old_logprobs: engine, pi_old = mu, so w_i = 1
        and only the token rules below act (on the update's log-probs against mu).
    weight_max: the upper bound on w_i (C in truncate, C_max in reject); a number, `auto` (from
        the measured mismatch) or null (no bound).
    weight_min: the lower bound on w_i (C_min, reject only); a number, `auto` or null.
    reject_max_token: reject a response whose largest |log pi_old - log mu| over its tokens
        exceeds this (nats); null: off.
    reject_k3: reject a response whose mean K3 = exp(d) - 1 - d over its tokens exceeds this
        (nats); null: off.
    thresholds_from: a `gspo-trl check-logprobs --json` report to take the `auto` values from;
        null: the first rollout batch's measured mismatch.
    max_rejected: warn when a rollout batch rejects more than this share (0-1) of its responses.

    Staleness (off by default; gspo_trl.training.probes.staleness, checked by
    gspo_trl.config.sections.engine_staleness, docs/engine-logprobs.md "Stale engine weights"):
    max_staleness: d >= 0; the engine's weights are synced every d + 1 rollout batches instead of
        every one, so a rollout batch is sampled by a policy 0 to d rollout batches old, as an
        asynchronous pipeline of depth d would sample it; 0: synced every rollout batch (TRL's way).

    Overlap (off by default; gspo_trl.training.probes.overlap, checked by
    gspo_trl.config.sections.engine_overlap, docs/async.md "Overlap in server mode"):
    overlap: `off` or `one_step` (vllm_mode: server only; docs/async.md): the server generates
        rollout batch k+1 while the trainer trains on batch k, so each row after the first batch
        is sampled exactly one policy version old.

    Sampling masks (gspo_trl.config.sections.engine_sampler, docs/engine-logprobs.md "Top-p, top-k
    and min-p"):
    sampling_masks: `off` or `replay`: re-apply the sampler's top_k/top_p/min_p filter to the
        trainer's logits and renormalise over the kept set, so that the engine's log-probs (of the
        filtered distribution) and the trainer's meet on one scale. Without it, engine log-probs as
        pi_old and the correction are refused under a reshaping sampler.
    """

    old_logprobs: str = "trainer"
    on_mismatch: str = "warn"
    max_bias_fraction: float = MAX_BIAS_FRACTION
    max_outside_clip: float = MAX_OUTSIDE_CLIP
    correction: str = "off"
    weight_max: float | Literal["auto"] | None = "auto"
    weight_min: float | Literal["auto"] | None = "auto"
    reject_max_token: float | Literal["auto"] | None = None
    reject_k3: float | Literal["auto"] | None = None
    thresholds_from: str | None = None
    max_rejected: float = 0.1
    max_staleness: int = 0
    sampling_masks: str = "off"
    overlap: str = "off"

    def __post_init__(self) -> None:
        if self.old_logprobs not in OLD_LOGPROBS_SOURCES:
            raise RecipeError(
                f"engine.old_logprobs must be one of {', '.join(OLD_LOGPROBS_SOURCES)}, "
                f"got {self.old_logprobs!r}"
            )
        if self.on_mismatch not in ON_MISMATCH_ACTIONS:
            raise RecipeError(
                f"engine.on_mismatch must be one of {', '.join(ON_MISMATCH_ACTIONS)}, "
                f"got {self.on_mismatch!r}"
            )
        if not 0.0 < self.max_bias_fraction <= 1.0 or not 0.0 <= self.max_outside_clip <= 1.0:
            raise RecipeError(
                "engine.max_bias_fraction must be in (0, 1] and engine.max_outside_clip in [0, 1], "
                f"got {self.max_bias_fraction} and {self.max_outside_clip}"
            )
        d = self.max_staleness
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_STALENESS:
            raise RecipeError(
                f"engine.max_staleness must be a whole number of rollout batches from 0 (the engine synced "
                f"every rollout batch) to {MAX_STALENESS}, got {self.max_staleness!r}"
            )
        check_overlap_value(self.overlap)

    @property
    def from_engine(self) -> bool:
        """True when pi_old is the engine's log-probs."""
        return self.old_logprobs == "engine"

    @property
    def corrects(self) -> bool:
        """True when engine.correction reweights or rejects responses."""
        return self.correction != "off"

    # One capability's keys each: what its probe receives (the user's keys stay flat under engine:).
    def old_logprobs_settings(self) -> OldLogprobsSettings:
        """pi_old's source and the mismatch guard: EngineLogprobsProbe's."""
        return OldLogprobsSettings(
            self.old_logprobs, self.on_mismatch, self.max_bias_fraction, self.max_outside_clip
        )

    def correction_settings(self) -> CorrectionSettings:
        """engine.correction and its thresholds: CorrectionProbe's."""
        return CorrectionSettings(
            correction=self.correction,
            weight_max=self.weight_max,
            weight_min=self.weight_min,
            reject_max_token=self.reject_max_token,
            reject_k3=self.reject_k3,
            thresholds_from=self.thresholds_from,
            max_rejected=self.max_rejected,
            from_engine=self.from_engine,
        )

    def staleness_settings(self) -> StalenessSettings:
        """engine.max_staleness: StalenessProbe's."""
        return StalenessSettings(self.max_staleness)

    def sampling_mask_settings(self) -> SamplingMaskSettings:
        """engine.sampling_masks: SamplingMaskProbe's."""
        return SamplingMaskSettings(self.sampling_masks)

    def overlap_settings(self) -> OverlapSettings:
        """engine.overlap: OverlapProbe's."""
        return OverlapSettings(self.overlap)


def check_engine_settings(config: EngineConfig, training: Mapping[str, Any]) -> None:
    """Engine log-probs need vLLM and an unreshaped (or replayed) sampler (`training`: the GRPOConfig
    fields); the correction's keys (gspo_trl.config.sections.engine_correction)."""
    check_correction_settings(config, training)
    check_staleness_settings(config, training)
    check_overlap_settings(config, training)
    if config.from_engine and not training.get("use_vllm"):
        raise RecipeError(
            "engine.old_logprobs: engine takes pi_old from vLLM's sampling log-probs; set use_vllm: true "
            "or use old_logprobs: trainer"
        )
    check_sampler_settings(config, training)
