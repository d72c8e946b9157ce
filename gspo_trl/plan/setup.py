"""The training setup a plan is made for: topology, strategy, and the GRPOConfig keys that move memory.

A key left out takes TRL's GRPOConfig default (gspo_trl.config.trl_fields), so a plan of a recipe
that leaves a key out plans what TRL will run; the rollout batch is TRL's (gspo_trl.config.batch).
TRL 1.16 has no `max_prompt_length`; the plan reads it when given (the longest prompt in tokens)
and otherwise assumes 512 and says so in the report. With `packing` (the recipe's top-level key)
the forwards run each row's own tokens, not the padded rectangle: the step time counts
`max_prompt_length + mean_completion_length` tokens a row (given, e.g. TRL's logged
`completions/mean_length` of an earlier run, or assumed half of max_completion_length and said so);
memory keeps the rectangle, the peak of a micro-batch whose every completion reaches the cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gspo_trl.config.batch import RolloutBatch, rollout_batch
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.core.errors import RecipeError
from gspo_trl.model.loading.precision import training_weight_precision
from gspo_trl.plan.model_shape import ModelShape, PlanError, dtype_bytes

STRATEGIES = ("ddp", "zero2", "zero3", "fsdp2")
PACKED_COMPLETION_SHARE = 0.5
"""With packing and no measured mean: completions assumed to average half of max_completion_length."""
DEEPSPEED_STRATEGIES = ("zero2", "zero3")
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PEFT_QWEN3_DEFAULT_TARGETS = ("q_proj", "v_proj")  # peft's default for model_type qwen3
ASSUMED_PROMPT_LENGTH = 512

_INT_KEYS = (
    "per_device_train_batch_size",
    "max_completion_length",
    "num_generations",
    "gradient_accumulation_steps",
    "num_iterations",
    "vllm_tensor_parallel_size",
)
_BOOL_KEYS = (
    "gradient_checkpointing",
    "use_vllm",
    "vllm_enable_sleep_mode",
    "cast_lm_head_to_fp32",
    "vllm_importance_sampling_correction",
)


@dataclass(frozen=True)
class LoraSpec:
    """The LoRA fields that size the adapters: rank and which linear modules get one."""

    r: int
    target_modules: tuple[str, ...]


@dataclass(frozen=True)
class Setup:
    """Everything besides the model that decides per-GPU memory and step cost."""

    strategy: str
    nodes: int
    gpus_per_node: int
    gpu_memory_gib: float
    weights_dtype: str
    per_device_train_batch_size: int
    max_prompt_length: int
    prompt_length_assumed: bool
    max_completion_length: int
    num_generations: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    num_iterations: int
    gradient_checkpointing: bool
    use_vllm: bool
    vllm_mode: str
    vllm_gpu_memory_utilization: float
    vllm_enable_sleep_mode: bool
    vllm_tensor_parallel_size: int
    bf16: bool
    beta: float
    cast_lm_head_to_fp32: bool
    vllm_importance_sampling_correction: bool
    lora: LoraSpec | None
    requested_dtype: str | None = None
    """The recipe's `model.dtype` (None: the checkpoint's, loaded as is)."""
    allow_pure_bf16: bool = False
    packing: bool = False
    """`packing: true`: the log-prob forwards run the rows' real tokens only."""
    mean_completion_length: float | None = None
    """Mean completion tokens of a row, when known; None: PACKED_COMPLETION_SHARE of the cap."""
    max_staleness: int = 0
    """`engine.max_staleness`: > 0 keeps a stale engine between syncs, which sleep mode cannot (validate
    refuses the pair), so no fix suggests `vllm_enable_sleep_mode: true` then."""

    @property
    def deepspeed(self) -> bool:
        return self.strategy in DEEPSPEED_STRATEGIES

    @property
    def train_weights_dtype(self) -> str:
        """The dtype the trainer loads and keeps the weights in (gspo_trl.model.loading.precision, the
        rule `gspo-trl train` applies: bfloat16 becomes float32 without DeepSpeed or LoRA)."""
        precision = training_weight_precision(
            self.requested_dtype, self.deepspeed, self.lora is not None, self.allow_pure_bf16
        )
        return precision.load_dtype if precision.upcast else self.weights_dtype

    @property
    def train_weight_bytes(self) -> int:
        return dtype_bytes(self.train_weights_dtype)

    @property
    def forward_weight_bytes(self) -> int:
        """Bytes per weight in the forward pass: DeepSpeed and FSDP2 run bf16 copies under
        `bf16`; DDP runs the trained weights themselves (autocast casts only matmul inputs)."""
        if self.bf16 and self.strategy != "ddp":
            return 2
        return self.train_weight_bytes

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of a matmul output: bf16 under autocast, else the weights' dtype."""
        return 2 if self.bf16 else self.forward_weight_bytes

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def sequence_length(self) -> int:
        """Prompt plus completion tokens of one sample, at their maxima."""
        return self.max_prompt_length + self.max_completion_length

    @property
    def forwarded_sequence_length(self) -> float:
        """Tokens a row costs the trainer's forwards: the padded width, or with packing the
        prompt plus the mean completion (known, or assumed: `completion_length_assumed`)."""
        if not self.packing:
            return float(self.sequence_length)
        mean = self.mean_completion_length
        if mean is None:
            mean = PACKED_COMPLETION_SHARE * self.max_completion_length
        return self.max_prompt_length + min(mean, self.max_completion_length)

    @property
    def completion_length_assumed(self) -> bool:
        return self.packing and self.mean_completion_length is None

    @property
    def micro_batch_tokens(self) -> int:
        """Tokens in one per-GPU forward/backward: per_device_train_batch_size x sequence_length."""
        return self.per_device_train_batch_size * self.sequence_length

    @property
    def weight_bytes(self) -> int:
        return dtype_bytes(self.weights_dtype)

    @property
    def colocated_vllm(self) -> bool:
        return self.use_vllm and self.vllm_mode == "colocate"

    @property
    def rollout_batch(self) -> RolloutBatch:
        return RolloutBatch.from_grpo_config(self)  # a Setup carries GRPOConfig's field names

    @property
    def generation_batch_size(self) -> int:
        """Completions per rollout batch on all GPUs."""
        return self.rollout_batch.generation_batch_size

    @property
    def computes_old_logprobs(self) -> bool:
        """TRL runs an extra no-grad forward for the old policy's log-probs unless every update is
        on-policy, and always with vLLM's importance-sampling correction."""
        correction = self.use_vllm and self.vllm_importance_sampling_correction
        return not self.rollout_batch.on_policy or correction


def _positive_int(training: dict[str, Any], key: str, default: int | None = None) -> int:
    value = training.get(key)
    value = (grpo_default(key) if default is None else default) if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"training.{key} = {value!r}: expected a positive integer")
    return value


def _bool(training: dict[str, Any], key: str, default: bool | None = None) -> bool:
    value = training.get(key)
    value = (grpo_default(key) if default is None else default) if value is None else value
    if not isinstance(value, bool):
        raise PlanError(f"training.{key} = {value!r}: expected true or false")
    return value


def make_lora(lora: dict[str, Any] | None) -> LoraSpec | None:
    """A `LoraSpec` from peft.LoraConfig fields (r, target_modules; the rest does not size memory)."""
    if lora is None:
        return None
    r = lora.get("r", 8)
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise PlanError(f"lora.r = {r!r}: expected a positive integer")
    targets = lora.get("target_modules") or PEFT_QWEN3_DEFAULT_TARGETS
    if targets == "all-linear":
        targets = LINEAR_MODULES
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    unknown = sorted(set(targets) - set(LINEAR_MODULES))
    if unknown:
        raise PlanError(
            f"lora.target_modules {unknown}: the plan knows {list(LINEAR_MODULES)} and all-linear"
        )
    return LoraSpec(r=r, target_modules=targets)


def make_setup(
    training: dict[str, Any],
    shape: ModelShape,
    strategy: str,
    nodes: int,
    gpus_per_node: int,
    gpu_memory_gb: float,
    lora: dict[str, Any] | None = None,
    dtype: str | None = None,
    allow_pure_bf16: bool = False,
    max_staleness: int = 0,
) -> Setup:
    """Validate the plan inputs; `gpu_memory_gb` is the GiB the plan may fill (gspo_trl.plan.planner.plan
    passes the usable share of a card's nominal size)."""
    if strategy not in STRATEGIES:
        raise PlanError(f"strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlanError(f"{name} = {value!r}: expected a positive integer")
    if not gpu_memory_gb > 0:
        raise PlanError(f"gpu_memory_gb = {gpu_memory_gb!r}: expected a positive number")
    weights_dtype = dtype or shape.torch_dtype
    dtype_bytes(weights_dtype)  # refuses unknown names early
    ints = {key: _positive_int(training, key) for key in _INT_KEYS}
    bools = {key: _bool(training, key) for key in _BOOL_KEYS}
    # TRL's base config: bf16 None means "unless fp16" (trl/trainer/base_config.py)
    bools["bf16"] = _bool(training, "bf16", not _bool(training, "fp16"))
    try:
        batch = rollout_batch(training, nodes * gpus_per_node, allow_partial_groups=True)
    except RecipeError as error:
        raise PlanError(str(error)) from None
    prompt = training.get("max_prompt_length")
    mode = training.get("vllm_mode", grpo_default("vllm_mode"))
    if mode not in ("colocate", "server"):
        raise PlanError(f"training.vllm_mode = {mode!r}: expected colocate or server")
    utilization = training.get("vllm_gpu_memory_utilization", grpo_default("vllm_gpu_memory_utilization"))
    if not 0 < utilization <= 1:
        raise PlanError(
            f"training.vllm_gpu_memory_utilization = {utilization!r}: expected a fraction in (0, 1]"
        )
    return Setup(
        strategy=strategy,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_memory_gib=float(gpu_memory_gb),
        weights_dtype=weights_dtype,
        max_prompt_length=_positive_int(training, "max_prompt_length", ASSUMED_PROMPT_LENGTH),
        prompt_length_assumed=prompt is None,
        steps_per_generation=batch.steps_per_generation,
        vllm_mode=mode,
        vllm_gpu_memory_utilization=float(utilization),
        beta=float(training.get("beta", grpo_default("beta"))),
        lora=make_lora(lora),
        requested_dtype=dtype,
        allow_pure_bf16=allow_pure_bf16,
        packing=bool(training.get("packing", False)),
        mean_completion_length=_mean_completion(training),
        max_staleness=max_staleness,
        **ints,
        **bools,
    )


def _mean_completion(training: dict[str, Any]) -> float | None:
    """`mean_completion_length` (tokens, > 0) when given; a packed plan's step time reads it."""
    value = training.get("mean_completion_length")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise PlanError(f"mean_completion_length = {value!r}: expected a positive number of tokens")
    return float(value)
