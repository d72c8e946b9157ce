"""gspo_trl.config.batch against TRL itself: the mirror of GRPOConfig's batch derivation gives what
the real `GRPOConfig.__post_init__` gives over a table of inputs and world sizes, and the trainer
lines its `on_policy` mirrors are still TRL's."""

from __future__ import annotations

import inspect
from fractions import Fraction

import pytest
from trl import GRPOConfig, GRPOTrainer

from gspo_trl.config.batch import RolloutBatch, rollout_batch
from gspo_trl.core.errors import RecipeError


def grpo_config_at(world_size: int, tmp_path, **keys) -> GRPOConfig:
    """The real GRPOConfig, its __post_init__ run as on `world_size` processes.

    TrainingArguments.world_size counts the launched processes; one CPU process stands in for
    them by answering that one property (everything else is TRL's own code path)."""

    class AtWorldSize(GRPOConfig):
        @property
        def world_size(self) -> int:
            return world_size

    return AtWorldSize(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **keys)


# (id, world size, GRPOConfig keys); None of them set = TRL's defaults.
TABLE = [
    ("TRL defaults", 1, {}),
    ("defaults at 8", 8, {}),
    ("accumulation sets steps", 2, {"gradient_accumulation_steps": 3, "num_generations": 6}),
    ("steps at 8", 8, {"per_device_train_batch_size": 16, "num_generations": 16, "steps_per_generation": 4}),
    ("30B at 24", 24, {"per_device_train_batch_size": 8, "num_generations": 16, "steps_per_generation": 4}),
    (
        "8B accumulation 2",
        8,
        {
            "per_device_train_batch_size": 8,
            "num_generations": 16,
            "steps_per_generation": 8,
            "gradient_accumulation_steps": 2,
        },
    ),
    (
        "generation batch",
        8,
        {"per_device_train_batch_size": 16, "num_generations": 16, "generation_batch_size": 512},
    ),
    (
        "generation batch, 3 ranks",
        3,
        {"per_device_train_batch_size": 4, "num_generations": 4, "generation_batch_size": 24},
    ),
    (
        "odd world size",
        3,
        {"per_device_train_batch_size": 8, "num_generations": 12, "steps_per_generation": 4},
    ),
    ("replays", 4, {"num_iterations": 2, "steps_per_generation": 2, "num_generations": 8}),
    # refused by TRL: each must be refused by the mirror too
    ("indivisible generation batch", 24, {"generation_batch_size": 100}),
    ("generation batch below one micro-batch", 8, {"generation_batch_size": 32}),
    ("both knobs", 1, {"generation_batch_size": 32, "steps_per_generation": 4}),
    (
        "partial groups",
        1,
        {"per_device_train_batch_size": 6, "num_generations": 16, "steps_per_generation": 4},
    ),
    (
        "partial groups at 3",
        3,
        {"per_device_train_batch_size": 8, "num_generations": 64, "steps_per_generation": 2},
    ),
    ("one generation", 1, {"num_generations": 1}),
]


@pytest.mark.parametrize(("world_size", "keys"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_mirror_is_grpo_config(tmp_path, world_size, keys) -> None:
    try:
        config = grpo_config_at(world_size, tmp_path, **keys)
    except ValueError as trl_refusal:
        with pytest.raises(RecipeError):
            rollout_batch(keys, world_size)
        print(f"TRL: {trl_refusal}")
        return
    batch = rollout_batch(keys, world_size)
    assert (batch.steps_per_generation, batch.generation_batch_size) == (
        config.steps_per_generation,
        config.generation_batch_size,
    )
    assert batch == RolloutBatch.from_grpo_config(config)  # what GSPOConfig reads back from TRL
    assert batch.prompts * config.num_generations == config.generation_batch_size


TRAINER_LINES = (
    "generate_every = self.args.steps_per_generation * self.num_iterations",
    "if self.args.gradient_accumulation_steps % generate_every != 0",
)
"""GRPOTrainer's regeneration period and its test for skipping pi_old (every update on-policy),
which RolloutBatch.micro_batches and .on_policy mirror."""


def test_on_policy_mirrors_the_trainer_source() -> None:
    source = inspect.getsource(GRPOTrainer)
    for line in TRAINER_LINES:
        assert line in source, f"TRL's GRPOTrainer changed: {line!r} is gone; re-check RolloutBatch.on_policy"


# (steps_per_generation, gradient_accumulation_steps, num_iterations, on-policy, updates per rollout batch)
POLICY = [
    (4, 1, 1, False, 4),  # GSPO's paper setting
    (1, 1, 1, True, 1),
    (4, 4, 1, True, 1),
    (8, 2, 1, False, 4),  # the 8B recipe
    (4, 8, 2, True, 1),  # one optimizer step per rollout batch, replayed: still on-policy
    (2, 1, 2, False, 4),  # replays are off-policy updates
    (3, 2, 1, False, 1.5),  # a step spans two rollout batches: some updates off-policy
]


@pytest.mark.parametrize(("steps", "accumulation", "iterations", "on_policy", "updates"), POLICY)
def test_on_policy_and_updates(steps, accumulation, iterations, on_policy, updates) -> None:
    batch = RolloutBatch(8, 1, steps, 8, accumulation, iterations)
    assert batch.on_policy is on_policy
    assert batch.optimizer_updates == updates


@pytest.mark.parametrize(
    ("steps", "accumulation", "iterations", "global_step", "into"),
    [
        (4, 1, 1, 0, 0),
        (4, 1, 1, 4, 0),  # a boundary: exact resume
        (4, 1, 1, 6, 2),
        (8, 2, 1, 5, 1),  # 4 updates per batch
        (2, 1, 2, 3, 3),  # num_iterations replays: 4 updates per batch
        (3, 2, 1, 1, 1),  # 1.5 updates per batch: step 1 ends 2 micro-batches into the first
        (3, 2, 1, 2, Fraction(1, 2)),  # and step 2 one micro-batch into the second
        (3, 2, 1, 3, 0),
    ],
)
def test_steps_into_rollout_batch(steps, accumulation, iterations, global_step, into) -> None:
    batch = RolloutBatch(8, 1, steps, 8, accumulation, iterations)
    assert batch.steps_into_rollout_batch(global_step) == into


def test_header_line() -> None:
    batch = rollout_batch(
        {"per_device_train_batch_size": 16, "num_generations": 16, "steps_per_generation": 4}, 8
    )
    assert batch.describe() == (
        "Rollout batch = 16 per GPU x 8 GPUs x 4 micro-batches = 512 completions = 32 prompts x 16; "
        "4 optimizer updates."
    )
    one = rollout_batch({"steps_per_generation": 1}, 1)
    assert one.describe("process").endswith(
        "1 process x 1 micro-batches = 8 completions = 1 prompts x 8; "
        "1 optimizer update; every update on-policy."
    )
