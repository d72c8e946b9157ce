"""The training setup a plan is made for: topology, strategy, and the GRPOConfig keys that move memory.

Defaults are TRL 1.16's GRPOConfig defaults (per_device_train_batch_size 8, num_generations 8,
max_completion_length 512, gradient_checkpointing True, bf16 True, vllm_mode colocate,
vllm_gpu_memory_utilization 0.3, beta 0.0), so a plan of a recipe that leaves a key out plans what
TRL will run. TRL 1.16 has no `max_prompt_length`; the plan reads it when given (the longest prompt
in tokens) and otherwise assumes 512 and says so in the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gspo_trl.model.precision import training_weight_precision
from gspo_trl.plan.model_shape import ModelShape, PlanError, dtype_bytes

STRATEGIES = ("ddp", "zero2", "zero3", "fsdp2")
DEEPSPEED_STRATEGIES = ("zero2", "zero3")
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PEFT_QWEN3_DEFAULT_TARGETS = ("q_proj", "v_proj")  # peft's default for model_type qwen3
ASSUMED_PROMPT_LENGTH = 512

_INT_KEYS = {
    "per_device_train_batch_size": 8,
    "max_completion_length": 512,
    "num_generations": 8,
    "gradient_accumulation_steps": 1,
    "num_iterations": 1,
    "vllm_tensor_parallel_size": 1,
}
_BOOL_KEYS = {
    "gradient_checkpointing": True,
    "use_vllm": False,
    "vllm_enable_sleep_mode": False,
    "bf16": True,
    "cast_lm_head_to_fp32": False,
    "vllm_importance_sampling_correction": True,
}


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

    @property
    def deepspeed(self) -> bool:
        return self.strategy in DEEPSPEED_STRATEGIES

    @property
    def train_weights_dtype(self) -> str:
        """The dtype the trainer loads and keeps the weights in (gspo_trl.model.precision, the
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
    def generation_batch_size(self) -> int:
        """Completions per rollout batch on all GPUs: per-device batch x world x steps_per_generation."""
        return self.per_device_train_batch_size * self.world_size * self.steps_per_generation

    @property
    def computes_old_logprobs(self) -> bool:
        """TRL 1.16 runs an extra no-grad forward for the old policy's log-probs when the rollout is
        reused across optimizer steps, or always with vLLM's importance-sampling correction."""
        generate_every = self.steps_per_generation * self.num_iterations
        misaligned = self.gradient_accumulation_steps % generate_every != 0
        return misaligned or (self.use_vllm and self.vllm_importance_sampling_correction)


def _positive_int(training: dict[str, Any], key: str, default: int) -> int:
    value = training.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"training.{key} = {value!r}: expected a positive integer")
    return value


def _bool(training: dict[str, Any], key: str, default: bool) -> bool:
    value = training.get(key, default)
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
) -> Setup:
    """Validate the plan inputs; `gpu_memory_gb` is the card's nominal size (80 for H100), read as GiB."""
    if strategy not in STRATEGIES:
        raise PlanError(f"strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlanError(f"{name} = {value!r}: expected a positive integer")
    if not gpu_memory_gb > 0:
        raise PlanError(f"gpu_memory_gb = {gpu_memory_gb!r}: expected a positive number")
    weights_dtype = dtype or shape.torch_dtype
    dtype_bytes(weights_dtype)  # refuses unknown names early
    ints = {key: _positive_int(training, key, default) for key, default in _INT_KEYS.items()}
    bools = {key: _bool(training, key, default) for key, default in _BOOL_KEYS.items()}
    prompt = training.get("max_prompt_length")
    mode = training.get("vllm_mode", "colocate")
    if mode not in ("colocate", "server"):
        raise PlanError(f"training.vllm_mode = {mode!r}: expected colocate or server")
    utilization = training.get("vllm_gpu_memory_utilization", 0.3)
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
        steps_per_generation=_positive_int(
            training, "steps_per_generation", ints["gradient_accumulation_steps"]
        ),
        vllm_mode=mode,
        vllm_gpu_memory_utilization=float(utilization),
        beta=float(training.get("beta", 0.0)),
        lora=make_lora(lora),
        requested_dtype=dtype,
        allow_pure_bf16=allow_pure_bf16,
        **ints,
        **bools,
    )
