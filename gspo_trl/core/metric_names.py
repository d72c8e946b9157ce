"""The names of the metrics a GSPO run logs: written once here, used by every writer and reader.

Probes write these keys; the console, `gspo-trl report`, `calibrate --from-run` and the demo read
them from metrics.jsonl. Families, each described where its capability is:
    gspo/mb{k}/STAT, gspo/offpolicy/STAT, gspo/zero_variance_groups   docs/gspo.md ("The diagnostics")
    gspo/engine_mismatch/*, gspo/behaviour/*, gspo/staleness/*, gspo/sampling_masks/*
                                                                      docs/engine-logprobs.md
    gspo/engine_routing/*, gspo/routing_replay/*, routing/* in STAT   docs/moe.md
    gspo/dynamic/{groups_kept,keep_rate,rounds,prompts_per_kept_group,dropped_tokens,padded_groups}
                                                                      docs/dynamic-sampling.md
    heldout/{score,judged,pass@k}                                     docs/data.md
    perf/{PHASE}_s, perf/total/{PHASE}_s, perf/*                      docs/performance.md

PHASE is one of PHASES or `other`. STAT is `log_ratio/*`, `clip/*`, `outside/{low,high}`,
`clip/len_{a}-{b}`, `entropy`, `responses`, or for a MoE model `routing/*`; TRL's own keys are not here.
"""

from __future__ import annotations

import re

METRICS_FILE = "metrics.jsonl"
"""OUTPUT_DIR/metrics.jsonl: every log event of a run, one JSON object a line."""

GSPO = "gspo"
OFFPOLICY = f"{GSPO}/offpolicy"
ZERO_VARIANCE_GROUPS = f"{GSPO}/zero_variance_groups"
TRL_ZERO_VARIANCE = "frac_reward_zero_std"
"""TRL's per-step share of tied groups, which ZERO_VARIANCE_GROUPS averages over a logging step."""
TRL_REWARDS = "rewards"
"""TRL's per-reward keys, `rewards/{name}/mean` and `rewards/{name}/std` over a rollout batch's
completions (trl/trainer/grpo_trainer.py:2823-2825; `name` is the reward function's)."""


def trl_reward(name: str, stat: str) -> str:
    """'rewards/{name}/{stat}' (stat: 'mean' or 'std'), TRL's key for one reward function."""
    return f"{TRL_REWARDS}/{name}/{stat}"


def trl_reward_stats(logs: dict, stat: str) -> dict[str, float]:
    """{reward name: value} of every `rewards/{name}/{stat}` key in `logs`, in logged order."""
    prefix, suffix = f"{TRL_REWARDS}/", f"/{stat}"
    return {
        k[len(prefix) : -len(suffix)]: v
        for k, v in logs.items()
        if k.startswith(prefix) and k.endswith(suffix)
    }


# per-update statistics (the STAT part, under minibatch(k) or OFFPOLICY)
LOG_RATIO = "log_ratio"
LOG_RATIO_STATS = ("mean", "std", "p5", "p50", "p95", "min", "max")
CLIP_LOW, CLIP_HIGH, CLIP_REGION = "clip/low", "clip/high", "clip/region"
CLIP_POS_ADV, CLIP_NEG_ADV = "clip/pos_adv", "clip/neg_adv"
OUTSIDE_LOW, OUTSIDE_HIGH = "outside/low", "outside/high"
ENTROPY, RESPONSES = "entropy", "responses"
FLIP_RATE = "routing/flip_rate"
"""Share (0-1) of (response token, MoE layer) pairs whose top-k expert set differs from pi_old's."""
FLIP_RATE_LAYER_MAX = "routing/flip_rate_layer_max"
"""The largest per-layer flip rate."""
FLIP_RATE_RESPONSE_MAX = "routing/flip_rate_response_max"
"""The largest per-response flip rate (over its tokens and layers)."""
FLIP_RATE_STATS = (FLIP_RATE, FLIP_RATE_LAYER_MAX, FLIP_RATE_RESPONSE_MAX)

ROUTING_REPLAYED = f"{GSPO}/routing_replay/replayed_updates"
"""With `moe.routing_replay` on: the share (0-1) of update passes since the last log that ran on the
recorded experts (pi_old's, or the engine's) instead of their router's own choice. Under replay the
flip rate counts where the current router WOULD choose other experts than the replayed ones; the
loss saw the replayed ones."""

ENGINE_MISMATCH = f"{GSPO}/engine_mismatch"
ENGINE_MISMATCH_MEAN = f"{ENGINE_MISMATCH}/mean"
ENGINE_MISMATCH_STD = f"{ENGINE_MISMATCH}/std"
ENGINE_MISMATCH_OUTSIDE_CLIP = f"{ENGINE_MISMATCH}/outside_clip"

ENGINE_ROUTING = f"{GSPO}/engine_routing"
ENGINE_ROUTING_FLIP_RATE = f"{ENGINE_ROUTING}/flip_rate"
"""Share of (response token, MoE layer) pairs where the trainer's router, at pi_old's weights,
chooses other experts than the inference engine chose while sampling (routing_replay: engine)."""
ENGINE_ROUTING_FLIP_RATE_LAYER_MAX = f"{ENGINE_ROUTING}/flip_rate_layer_max"

CORRECTION = f"{GSPO}/behaviour"
"""engine.correction's metrics; they keep the name `behaviour` (the behaviour policy mu) from
before the key was called `correction`, so dashboards and past runs compare."""
CORRECTION_WEIGHT_MEAN = f"{CORRECTION}/weight_mean"
"""Mean loss weight of a rollout batch's responses under engine.correction (1 = no correction)."""
CORRECTION_WEIGHT_P1 = f"{CORRECTION}/weight_p1"
CORRECTION_WEIGHT_P99 = f"{CORRECTION}/weight_p99"
"""1st and 99th percentiles of the weight w_i before truncation or rejection."""
CORRECTION_TRUNCATED = f"{CORRECTION}/truncated"
CORRECTION_REJECTED = f"{CORRECTION}/rejected"
"""Shares (0-1) of the rollout batch's responses truncated at weight_max, or rejected (weight 0)."""


def correction_by_length(share: str, bucket: str) -> str:
    """'gspo/behaviour/rejected/len_64-256' (share: CORRECTION_TRUNCATED or _REJECTED; bucket:
    diagnostics.bucket_labels)."""
    return f"{share}/{bucket}"


SAMPLING_MASKS = f"{GSPO}/sampling_masks"
SAMPLING_KEPT_MASS = f"{SAMPLING_MASKS}/kept_mass"
"""engine.sampling_masks: replay: mean S_t (0-1) over the rollout batches' completion tokens, the
probability mass the top_p/top_k/min_p filter kept (replayed on pi_old's logits)."""
SAMPLING_OUTSIDE = f"{SAMPLING_MASKS}/sampled_outside"
"""Share (0-1) of sampled tokens the replayed filter dropped (a kept set unlike the engine's; each
such token is added back to its kept set)."""

STALENESS = f"{GSPO}/staleness"
STALENESS_MEAN = f"{STALENESS}/mean"
STALENESS_MAX = f"{STALENESS}/max"
"""engine.max_staleness: rollout batches the engine's weights lagged the trainer's, over the rollout
batches generated since the last log (0 .. max_staleness); under engine.overlap with sampling.dynamic,
over the rows trained since the last log (refill rows lag 0, prefetched rows 1)."""
STALENESS_UPDATES = f"{STALENESS}/updates"
"""The same lag in optimizer steps (mean)."""
STALENESS_ENGINE_STEP = f"{STALENESS}/engine_step"
"""The optimizer step of the engine's weights at the last rollout batch (the rows' version)."""
STALENESS_WEIGHT_MEAN, STALENESS_WEIGHT_STD = "weight_mean", "weight_std"
"""Per staleness k: mean and spread of w_i = exp(mean_t(log pi_old - log mu)) before correction."""
STALENESS_CLIP = "clip"
"""Per staleness k: share (0-1) of off-policy updates' responses (minibatch >= 2) actively clipped."""
STALENESS_FLIP_RATE = "flip_rate"
"""Per staleness k, MoE: mean per-response routing flip rate (0-1) of off-policy updates' passes
(the router at the update's weights vs pi_old's: routing/flip_rate's rows, by staleness)."""
STALENESS_RESPONSES = "responses"
"""Per staleness k: response-updates measured since the last log."""
_STALENESS_STATS = (
    STALENESS_WEIGHT_MEAN,
    STALENESS_WEIGHT_STD,
    STALENESS_CLIP,
    STALENESS_FLIP_RATE,
    STALENESS_RESPONSES,
)


def by_staleness(k: int, stat: str) -> str:
    """'gspo/staleness/d{k}/{stat}': responses sampled k rollout batches stale (stat: _STALENESS_STATS)."""
    return f"{STALENESS}/d{k}/{stat}"


DYNAMIC = f"{GSPO}/dynamic"
DYNAMIC_GROUPS_KEPT = f"{DYNAMIC}/groups_kept"
"""Informative groups (rewards not all tied) in the trained rollout batch, before any repeat."""
DYNAMIC_KEEP_RATE = f"{DYNAMIC}/keep_rate"
"""Share (0-1) of the groups generated for a rollout batch, every round, that were informative."""
DYNAMIC_ROUNDS = f"{DYNAMIC}/rounds"
"""Generation rounds a rollout batch took (1: nothing refilled)."""
DYNAMIC_PROMPTS_PER_KEPT_GROUP = f"{DYNAMIC}/prompts_per_kept_group"
"""Prompts generated for a rollout batch per informative group trained (1: none dropped)."""
DYNAMIC_DROPPED_TOKENS = f"{DYNAMIC}/dropped_tokens"
"""Generated completion tokens, all ranks, of the groups left out of the trained batch."""
DYNAMIC_PADDED_GROUPS = f"{DYNAMIC}/padded_groups"
"""Groups repeated to fill a batch that reached sampling.max_rounds short."""
_DYNAMIC_FIELDS = (
    "groups_kept",
    "keep_rate",
    "rounds",
    "prompts_per_kept_group",
    "dropped_tokens",
    "padded_groups",
)

HELDOUT = "heldout"
HELDOUT_SCORE = f"{HELDOUT}/score"
HELDOUT_JUDGED = f"{HELDOUT}/judged"
HELDOUT_PASS_AT = f"{HELDOUT}/pass@"
"""Prefix of `heldout/pass@{k}` (see `heldout_pass_at`)."""

PERF = "perf"
PHASE_GENERATION, PHASE_REWARDS, PHASE_OLD_LOGPROBS = "generation", "rewards", "old_logprobs"
PHASE_UPDATE, PHASE_WEIGHT_SYNC = "update", "weight_sync"
PHASE_HELDOUT, PHASE_CHECKPOINT, PHASE_OTHER = "heldout", "checkpoint", "other"
PHASE_SETUP = "setup"
PHASES = (
    PHASE_SETUP,
    PHASE_GENERATION,
    PHASE_REWARDS,
    PHASE_OLD_LOGPROBS,
    PHASE_UPDATE,
    PHASE_WEIGHT_SYNC,
    PHASE_HELDOUT,
    PHASE_CHECKPOINT,
)
"""The timed phases, in the order `gspo-trl report` stacks them (`other` is the remainder)."""
PERF_WALL = f"{PERF}/wall_s"
PERF_GENERATED_TOKENS = f"{PERF}/generated_tokens"
PERF_TRAINED_TOKENS = f"{PERF}/trained_tokens"
PERF_TOKENS_PER_S = f"{PERF}/tokens_per_s"
PERF_TRAINED_TOKENS_PER_S = f"{PERF}/trained_tokens_per_s"
PERF_UPDATE_FLOPS = f"{PERF}/update_flops"
PERF_MFU = f"{PERF}/mfu"
PERF_PACKED_FRACTION = f"{PERF}/packed_fraction"
"""With `packing: true`: tokens the log-prob forwards ran / the padded rectangle's (0-1]."""
PERF_OVERLAP_REQUEST = f"{PERF}/overlap_request_s"
"""engine.overlap: one_step: wall seconds of the server requests collected in the window, each sent
one rollout batch ahead (the generation hidden behind training; perf/generation_s is the wait)."""
_PERF_FIELDS = ("wall_s", "generated_tokens", "trained_tokens", "tokens_per_s", "trained_tokens_per_s")


def perf_seconds(phase: str) -> str:
    """'perf/{phase}_s': one phase's seconds in a logging window (phase: PHASES or PHASE_OTHER)."""
    return f"{PERF}/{phase}_s"


def perf_total(phase: str) -> str:
    """'perf/total/{phase}_s': one phase's seconds summed over the run, in the final summary."""
    return f"{PERF}/total/{phase}_s"


MINIBATCH_REGEX = rf"{re.escape(GSPO)}/mb[1-9]\d*"
"""A regular expression for any `minibatch(k)` prefix."""


def minibatch(index: int) -> str:
    """'gspo/mb{index}': the prefix of one update's statistics (1-based within a rollout batch)."""
    return f"{GSPO}/mb{index}"


def log_ratio(stat: str) -> str:
    """'log_ratio/{stat}', a STAT (stat: one of LOG_RATIO_STATS)."""
    return f"{LOG_RATIO}/{stat}"


def clip_by_length(bucket: str) -> str:
    """'clip/{bucket}', a STAT (bucket: 'len_64-256', from diagnostics.bucket_labels)."""
    return f"clip/{bucket}"


def under(prefix: str, stat: str) -> str:
    """A full key: `under(OFFPOLICY, CLIP_REGION)` = 'gspo/offpolicy/clip/region'."""
    return f"{prefix}/{stat}"


def heldout(name: str) -> str:
    """'heldout/{name}' for a held-out grade's field (score, judged)."""
    return f"{HELDOUT}/{name}"


def heldout_pass_at(k: int) -> str:
    return f"{HELDOUT_PASS_AT}{k}"


_STAT = "|".join(
    re.escape(s)
    for s in (
        *(log_ratio(stat) for stat in LOG_RATIO_STATS),
        CLIP_LOW,
        CLIP_HIGH,
        CLIP_REGION,
        CLIP_POS_ADV,
        CLIP_NEG_ADV,
        OUTSIDE_LOW,
        OUTSIDE_HIGH,
        ENTROPY,
        RESPONSES,
        *FLIP_RATE_STATS,
    )
)
METRIC_PATTERN = re.compile(
    rf"(?:{MINIBATCH_REGEX}|{re.escape(OFFPOLICY)})/(?:{_STAT}|clip/len_\d+-(?:\d+|inf))"
    rf"|{re.escape(ZERO_VARIANCE_GROUPS)}|{re.escape(ROUTING_REPLAYED)}"
    rf"|{re.escape(ENGINE_MISMATCH)}/(?:mean|std|outside_clip)"
    rf"|{re.escape(ENGINE_ROUTING)}/(?:flip_rate|flip_rate_layer_max)"
    rf"|{re.escape(CORRECTION)}/(?:weight_(?:mean|p1|p99)|(?:truncated|rejected)(?:/len_\d+-(?:\d+|inf))?)"
    rf"|{re.escape(DYNAMIC)}/(?:{'|'.join(_DYNAMIC_FIELDS)})"
    rf"|{re.escape(STALENESS)}/(?:mean|max|updates|engine_step|d\d+/(?:{'|'.join(_STALENESS_STATS)}))"
    rf"|{re.escape(SAMPLING_MASKS)}/(?:kept_mass|sampled_outside)"
    rf"|(?:eval_)?{re.escape(HELDOUT)}/(?:score|judged|pass@[1-9]\d*)"
    rf"|{PERF}/(?:total/)?(?:{'|'.join((*PHASES, PHASE_OTHER))})_s"
    rf"|{PERF}/(?:{'|'.join((*_PERF_FIELDS, 'update_flops', 'mfu', 'packed_fraction', 'overlap_request_s'))})"
)
"""Every key above, fully spelled (`eval_heldout/*`: the same under the Trainer's eval prefix)."""


def is_metric_name(key: str) -> bool:
    """True for a key this package logs (see the module docstring)."""
    return METRIC_PATTERN.fullmatch(key) is not None
