"""One rollout batch in numbers: how TRL splits it, and whether any update is off-policy.

TRL owns these rules: `GRPOConfig.__post_init__` derives the generation batch from
per_device_train_batch_size x processes x steps_per_generation (trl/trainer/grpo_config.py,
"The current default effective batch size" to "must be divisible by num_generations"), and
`GRPOTrainer` regenerates every `steps_per_generation * num_iterations` micro-batches and
recomputes pi_old only when `gradient_accumulation_steps % generate_every != 0`
(grpo_trainer.py, `_generate_and_score_completions`). Validation, the plan and the recipe
headers need the same numbers without importing TRL (~5 s), so they are mirrored here, once;
tests/config/test_config_batch.py pins the mirror to the real GRPOConfig and trainer source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.core.errors import RecipeError

BATCH_KEYS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_generations",
    "num_iterations",
)
"""GRPOConfig keys the rollout batch reads besides the two that size it (one of
generation_batch_size / steps_per_generation); a key left out takes TRL's default."""


@dataclass(frozen=True)
class RolloutBatch:
    """One rollout batch at a world size, as GRPOTrainer consumes it.

    TRL samples `generation_batch_size` completions (`prompts` groups of `num_generations`),
    splits them into `steps_per_generation` micro-batches of `per_device_train_batch_size`
    per process, replays that buffer `num_iterations` times, and steps the optimizer every
    `gradient_accumulation_steps` micro-batches.
    """

    per_device_train_batch_size: int
    world_size: int
    steps_per_generation: int
    num_generations: int
    gradient_accumulation_steps: int = 1
    num_iterations: int = 1

    @classmethod
    def from_grpo_config(cls, config: Any) -> RolloutBatch:
        """The batch a built GRPOConfig resolved (TRL's own __post_init__ filled steps_per_generation),
        or any object with the same field names (the plan's Setup)."""
        return cls(
            per_device_train_batch_size=config.per_device_train_batch_size,
            world_size=config.world_size,
            steps_per_generation=config.steps_per_generation,
            num_generations=config.num_generations,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            num_iterations=config.num_iterations,
        )

    @property
    def global_micro_batch(self) -> int:
        """Completions in one micro-batch over all processes."""
        return self.per_device_train_batch_size * self.world_size

    @property
    def generation_batch_size(self) -> int:
        """Completions sampled per rollout batch (TRL's generation_batch_size)."""
        return self.global_micro_batch * self.steps_per_generation

    @property
    def whole_groups(self) -> bool:
        """TRL refuses a generation batch that splits a prompt's group."""
        return self.generation_batch_size % self.num_generations == 0

    @property
    def prompts(self) -> int:
        """Prompts (groups of num_generations) per rollout batch."""
        return self.generation_batch_size // self.num_generations

    @property
    def micro_batches(self) -> int:
        """Micro-batches trained on one rollout batch: TRL's `generate_every`."""
        return self.steps_per_generation * self.num_iterations

    @property
    def optimizer_updates(self) -> Fraction:
        """Optimizer steps per rollout batch (a fraction when a step spans rollout batches)."""
        return Fraction(self.micro_batches, self.gradient_accumulation_steps)

    @property
    def completions_per_optimizer_step(self) -> int:
        return self.global_micro_batch * self.gradient_accumulation_steps

    @property
    def on_policy(self) -> bool:
        """Every optimizer step sees data from the current policy, so TRL skips pi_old and
        s_i = 1: GSPO is then exactly GRPO."""
        return self.gradient_accumulation_steps % self.micro_batches == 0

    def steps_into_rollout_batch(self, global_step: int) -> Fraction:
        """Optimizer steps of the current rollout batch done at `global_step`: 0 at a boundary.

        TRL generates when its micro-batch counter is a multiple of `micro_batches`
        (grpo_trainer.py: `self._step % generate_every == 0`), so a checkpoint there resumes
        exactly; elsewhere the rest of the batch lived in memory only, and the resumed run
        generates a fresh batch. Counted from step 0: a run already resumed mid-batch once has
        its boundaries shifted by that resume.
        """
        micro = global_step * self.gradient_accumulation_steps
        return Fraction(micro % self.micro_batches, self.gradient_accumulation_steps)

    def groups_problem(self) -> str | None:
        """Why TRL would refuse this batch for its groups, naming the keys; None when it holds whole ones."""
        if self.whole_groups:
            return None
        return (
            f"num_generations: the generation batch, per_device_train_batch_size "
            f"({self.per_device_train_batch_size}) x {self.world_size} process(es) x steps_per_generation "
            f"({self.steps_per_generation}) = {self.generation_batch_size}, must hold whole groups of "
            f"{self.num_generations}. Change per_device_train_batch_size or num_generations so that it "
            "divides."
        )

    def describe(self, unit: str = "GPU") -> str:
        """The recipe header's batch line, e.g. `Rollout batch = 16 per GPU x 8 GPUs x 4 micro-batches
        = 512 completions = 32 prompts x 16; 4 optimizer updates.` (`unit`: GPU or process)."""
        updates = self.optimizer_updates
        count = str(updates.numerator) if updates.denominator == 1 else f"{float(updates):g}"
        plural = "s" if updates != 1 else ""
        policy = "; every update on-policy" if self.on_policy else ""
        return (
            f"Rollout batch = {self.per_device_train_batch_size} per {unit} x {self.world_size} "
            f"{_plural(unit, self.world_size)} x {self.steps_per_generation} micro-batches = "
            f"{self.generation_batch_size} completions = {self.prompts} prompts x {self.num_generations}; "
            f"{count} optimizer update{plural}{policy}."
        )


def _plural(unit: str, count: int) -> str:
    if count == 1:
        return unit
    return unit + ("es" if unit.endswith("s") else "s")


def _positive(training: Mapping[str, Any], key: str) -> int:
    value = training.get(key)
    value = grpo_default(key) if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RecipeError(f"{key}: {value!r} must be a positive integer")
    return value


def rollout_batch(
    training: Mapping[str, Any], world_size: int, *, allow_partial_groups: bool = False
) -> RolloutBatch:
    """The rollout batch GRPOConfig derives from these keys at `world_size` processes.

    Keys left out take TRL's defaults. Raises RecipeError, naming the recipe keys, where TRL's
    __post_init__ raises ValueError; with `allow_partial_groups` a batch that splits a group is
    returned (see `RolloutBatch.groups_problem`), so the plan can still show it.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise RecipeError(f"world size {world_size!r}: expected a positive number of processes")
    per_device, accumulation, num_generations, num_iterations = (_positive(training, k) for k in BATCH_KEYS)
    generation_batch = training.get("generation_batch_size")
    steps = training.get("steps_per_generation")
    global_micro_batch = per_device * world_size
    if generation_batch is not None and steps is not None:
        raise RecipeError(
            "generation_batch_size and steps_per_generation: set one of them, not both "
            "(generation_batch_size = per_device_train_batch_size x processes x steps_per_generation)"
        )
    if generation_batch is None:
        steps = accumulation if steps is None else _positive(training, "steps_per_generation")
    else:
        generation_batch = _positive(training, "generation_batch_size")
        if generation_batch % global_micro_batch:
            raise RecipeError(
                f"generation_batch_size: {generation_batch} is not divisible by per_device_train_batch_size "
                f"({per_device}) x {world_size} process(es) = {global_micro_batch}"
            )
        steps = generation_batch // global_micro_batch
    if num_generations < 2:
        raise RecipeError(f"num_generations: {num_generations}; group advantages need at least 2")
    batch = RolloutBatch(per_device, world_size, steps, num_generations, accumulation, num_iterations)
    problem = batch.groups_problem()
    if problem and not allow_partial_groups:
        raise RecipeError(problem)
    return batch


def is_server_mode(training: Mapping[str, Any]) -> bool:
    """TRL's vllm_mode server: one node runs `trl vllm-serve` and trains nothing."""
    use_vllm = training.get("use_vllm", grpo_default("use_vllm"))
    return bool(use_vllm) and training.get("vllm_mode", grpo_default("vllm_mode")) == "server"


def training_nodes(nodes: int, server_mode: bool) -> int:
    """Nodes that train: all of them, less the vLLM server node in server mode."""
    return nodes - 1 if server_mode else nodes
