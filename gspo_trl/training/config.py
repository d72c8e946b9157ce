"""`GSPOConfig`: TRL's `GRPOConfig` with GSPO's settings as its defaults, and GSPO's own fields.

TRL pairs each trainer with a config dataclass; a subclass adds fields to the config rather
than keyword arguments to the trainer. So `GSPOConfig()` is the paper's GSPO (sequence-level
ratio, `loss_type="grpo"`, beta 0, clip range 3e-4 / 4e-4, 4 minibatch updates per rollout
batch) where `GRPOConfig()` is TRL's defaults, and it refuses what would silently not be GSPO
(token-sum losses with sequence ratios, clip ranges outside (0, 1) or at the wrong level,
GSPO-token without token ratios, all-on-policy updates) with the functions a recipe's
validation calls (gspo_trl.config.invariants), so with the same messages.

    from gspo_trl import GSPOConfig, GSPOTrainer
    trainer = GSPOTrainer(model="Qwen/Qwen3-0.6B", args=GSPOConfig(output_dir="runs/x"),
                          reward_funcs=[rewards.get("math")], train_dataset=dataset)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOConfig

from gspo_trl.config.batch import RolloutBatch
from gspo_trl.config.defaults import GSPO_DEFAULTS
from gspo_trl.config.fields import build_dataclass
from gspo_trl.config.invariants import algorithm_of, check_off_policy
from gspo_trl.config.rewards_section_checks import check_reward_weights
from gspo_trl.config.sections import (
    TRAINER_SECTIONS,
    DiagnosticsConfig,
    EngineConfig,
    MoeConfig,
    SamplingConfig,
)
from gspo_trl.config.sections.engine import check_engine_settings
from gspo_trl.config.sections.moe import check_moe_settings
from gspo_trl.config.sections.sampling import check_sampling_settings
from gspo_trl.config.validation import check_gspo_settings
from gspo_trl.core.errors import RecipeError
from gspo_trl.model.loading.precision import cpu_mixed_precision


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class GSPOConfig(GRPOConfig):
    """GRPOConfig whose defaults are GSPO's (gspo_trl.config.defaults), plus:

    gspo_token: GSPO-token, per-token advantages with the sequence ratio's value and clip
        decision on every token (needs importance_sampling_level="token"); see docs/gspo.md.
    diagnostics: a DiagnosticsConfig (or its fields as a dict: length_buckets, warn thresholds, ...).
    allow_on_policy: run even when every update is on-policy (then GSPO is exactly GRPO).
    engine: an EngineConfig (or a dict): `EngineConfig(old_logprobs="engine")` takes pi_old from
        vLLM's sampling log-probs instead of a trainer forward (docs/engine-logprobs.md).
    moe: a MoeConfig (or a dict): `MoeConfig(routing_replay="old")` replays pi_old's experts in the
        updates of a mixture-of-experts model (docs/moe.md).
    sampling: a SamplingConfig (or a dict): `SamplingConfig(dynamic=True)` drops the groups whose
        rewards tie and refills the rollout batch (docs/dynamic-sampling.md).
    packing: run pi_old's, the reference's and the updates' forwards on the rows' real tokens,
        packed without padding (docs/performance.md "Packing"); the same log-probs and loss.

    A dict is built into its dataclass when the config is built, with a recipe's checks and
    one-line errors (gspo_trl.config.sections.*); afterwards the four fields hold dataclasses, and
    `to_dict()` writes them as dicts.
    """

    importance_sampling_level: str = field(
        default=GSPO_DEFAULTS["importance_sampling_level"], metadata=_help("'sequence': GSPO's ratio")
    )
    loss_type: str = field(
        default=GSPO_DEFAULTS["loss_type"], metadata=_help("mean over a response's tokens, then responses")
    )
    beta: float = field(default=GSPO_DEFAULTS["beta"], metadata=_help("KL coefficient; GSPO uses none"))
    epsilon: float = field(default=GSPO_DEFAULTS["epsilon"], metadata=_help("lower clip half-width"))
    epsilon_high: float | None = field(
        default=GSPO_DEFAULTS["epsilon_high"], metadata=_help("upper clip half-width")
    )
    steps_per_generation: int | None = field(
        default=None,
        metadata=_help(
            f"minibatch updates per rollout batch (default {GSPO_DEFAULTS['steps_per_generation']})"
        ),
    )
    gradient_accumulation_steps: int = field(
        default=GSPO_DEFAULTS["gradient_accumulation_steps"],
        metadata=_help("one optimizer step per minibatch"),
    )
    vllm_importance_sampling_correction: bool = field(
        default=GSPO_DEFAULTS["vllm_importance_sampling_correction"],
        metadata=_help("TRL's engine/trainer reweighting; off for GSPO (see gspo_trl.config.defaults)"),
    )
    use_cpu: bool | None = field(  # type: ignore[assignment]
        default=None, metadata=_help("train on CPU; unset: True when no GPU is visible")
    )
    gspo_token: bool = field(default=False, metadata=_help("GSPO-token: per-token advantages"))
    diagnostics: DiagnosticsConfig | dict[str, Any] | None = field(
        default=None, metadata=_help("DiagnosticsConfig, or its fields as a dict")
    )
    allow_on_policy: bool = field(
        default=False, metadata=_help("allow a run whose updates are all on-policy")
    )
    engine: EngineConfig | dict[str, Any] | None = field(
        default=None, metadata=_help("EngineConfig (or a dict): old_logprobs trainer|engine, on_mismatch")
    )
    moe: MoeConfig | dict[str, Any] | None = field(
        default=None, metadata=_help("MoeConfig (or a dict): routing_replay off|old|engine")
    )
    sampling: SamplingConfig | dict[str, Any] | None = field(
        default=None, metadata=_help("SamplingConfig (or a dict): dynamic, max_rounds")
    )
    packing: bool = field(
        default=False, metadata=_help("padding-free log-prob forwards (same log-probs, fewer tokens)")
    )

    def __post_init__(self) -> None:
        if self.steps_per_generation is None and self.generation_batch_size is None:
            self.steps_per_generation = GSPO_DEFAULTS["steps_per_generation"]
        # each section built (and its own values checked) once, now, not at the first log
        for section in TRAINER_SECTIONS:
            setattr(self, section.name, _typed(section.kind, getattr(self, section.name), section.name))
        self.bf16, self.use_cpu = cpu_mixed_precision(self.bf16, self.use_cpu, torch.cuda.is_available())
        super().__post_init__()
        settings = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        check_gspo_settings(self.algorithm, settings)
        check_engine_settings(self.engine, settings)
        check_sampling_settings(self.sampling, settings)
        if self.reward_weights is not None:
            check_reward_weights(self.reward_weights)
        on_policy = RolloutBatch.from_grpo_config(self).on_policy
        check_off_policy(self.algorithm, on_policy, self.allow_on_policy)
        check_moe_settings(self.moe, settings, self.engine, on_policy)

    @property
    def algorithm(self) -> str:
        """'gspo', 'gspo_token' or 'grpo' (token-level ratios without GSPO-token)."""
        return algorithm_of(self.importance_sampling_level, self.gspo_token)

    def to_dict(self) -> dict[str, Any]:
        """TrainingArguments.to_dict, with the sections as plain dicts (JSON, trackers)."""
        out = super().to_dict()
        for section in TRAINER_SECTIONS:
            out[section.name] = dataclasses.asdict(getattr(self, section.name))
        return out


def _typed(kind: type, value: Any, name: str) -> Any:
    """`value` as a `kind` dataclass: itself, built from a dict (a recipe's checks and messages),
    or the defaults for None."""
    if isinstance(value, kind):
        return value
    if value is None:
        return kind()
    if not isinstance(value, dict):
        raise RecipeError(
            f"{name}: expected a {kind.__name__} or a dict of its fields, got {type(value).__name__}"
        )
    return build_dataclass(kind, dict(value), name)
