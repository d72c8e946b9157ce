"""A plan for a whole recipe: its training keys on a topology, plus what only the recipe knows.

Beyond `plan(...)`'s memory and work, a recipe decides whether its batches divide at the
world size (TRL refuses a generation batch that does not hold whole groups), how many
optimizer updates each rollout batch feeds (GSPO needs >= 2, else every ratio is 1), the
held-out evaluation it runs (gspo_trl.plan.heldout_memory), and the cost its header promises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gspo_trl.config.recipe import Recipe
from gspo_trl.config.validation import updates_per_rollout_batch
from gspo_trl.plan.heldout_memory import HeldoutLoad, heldout_load
from gspo_trl.plan.launch import RecipeHeader, parse_cost_minutes, read_header
from gspo_trl.plan.model_shape import ModelShape, PlanError, load_model_shape
from gspo_trl.plan.planner import Plan, plan
from gspo_trl.plan.topology import Topology

TINY = "tiny"


@dataclass(frozen=True)
class BatchCheck:
    """The rollout batch at this world size: does it hold whole groups, how many updates it feeds."""

    generation_batch: int
    num_generations: int
    steps_per_generation: int
    updates: int
    problem: str | None


@dataclass(frozen=True)
class RecipePlan:
    recipe: Recipe
    topology: Topology
    plan: Plan
    batch: BatchCheck
    heldout: HeldoutLoad | None
    header_cost: str | None

    @property
    def header_minutes_per_step(self) -> tuple[float, float] | None:
        return parse_cost_minutes(self.header_cost)


def tiny_shape() -> ModelShape:
    """The locally built CPU model's shape (gspo_trl.model.tiny), without building it."""
    from gspo_trl.model.tiny import TinyModelSpec

    spec = TinyModelSpec()
    return ModelShape(
        name=TINY,
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_layers=spec.num_hidden_layers,
        num_heads=spec.num_attention_heads,
        num_kv_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        tie_word_embeddings=True,
        torch_dtype="float32",
        max_position_embeddings=spec.max_position_embeddings,
    )


def recipe_shape(recipe: Recipe) -> ModelShape:
    """The recipe model's shape: tiny, a shipped config, or a local directory (never a download)."""
    name = recipe.model.name_or_path
    return tiny_shape() if name == TINY else load_model_shape(name)


def check_batch(training: dict[str, Any], world_size: int) -> BatchCheck:
    """TRL's generation batch at `world_size` and the updates it feeds (gspo_trl.config.validation)."""
    per_device = int(training.get("per_device_train_batch_size", 8))
    num_generations = int(training.get("num_generations") or 8)
    explicit = training.get("generation_batch_size")
    problem = None
    if explicit:
        generation_batch = int(explicit)
        steps, remainder = divmod(generation_batch, per_device * world_size)
        if remainder or steps < 1:
            problem = (
                f"generation_batch_size {generation_batch} is not a multiple of per_device_train_batch_size "
                f"({per_device}) x {world_size} processes"
            )
    else:
        steps = int(training.get("steps_per_generation") or training.get("gradient_accumulation_steps", 1))
        generation_batch = per_device * world_size * steps
    if problem is None and generation_batch % num_generations:
        problem = (
            f"num_generations: the generation batch {generation_batch} does not hold whole groups of "
            f"{num_generations} at {world_size} processes; change per_device_train_batch_size or "
            "num_generations"
        )
    updates = updates_per_rollout_batch(training, world_size)
    return BatchCheck(generation_batch, num_generations, max(1, steps), updates, problem)


def plan_recipe(recipe: Recipe, topology: Topology, header: RecipeHeader | None = None) -> RecipePlan:
    """Plan `recipe` on `topology` (gspo_trl.plan.topology.resolve_topology)."""
    header = header if header is not None else read_header(recipe.source)
    training = dict(recipe.training)
    batch = check_batch(training, topology.world_size)
    training["steps_per_generation"] = batch.steps_per_generation
    training.pop("generation_batch_size", None)
    try:
        result = plan(
            training,
            recipe_shape(recipe),
            strategy=topology.strategy,
            nodes=topology.training_nodes,
            gpus_per_node=topology.gpus_per_node,
            gpu_memory_gb=topology.gpu_memory_gb,
            lora=recipe.model.lora,
            dtype=recipe.model.dtype,
            allow_pure_bf16=recipe.model.allow_pure_bf16,
        )
    except PlanError as error:
        raise PlanError(f"recipe {recipe.source}: {error}") from None
    return RecipePlan(recipe, topology, result, batch, heldout_load(recipe, result), header.cost)


def _plannable_offline(name: str) -> bool:
    """A shipped config or a local directory with config.json: a plan that needs no download."""
    from pathlib import Path

    from gspo_trl.plan.model_shape import shipped_models

    lowered = {hub_id.lower() for hub_id in shipped_models()}
    local = Path(name).expanduser()
    return name.lower() in lowered or (local.is_dir() and (local / "config.json").is_file())


def header_hardware_warning(recipe: Recipe) -> str | None:
    """One line when the recipe's own header hardware does not fit per the plan; else None.

    Only for recipes whose header states GPU hardware and whose model plans offline; a plan
    input that cannot work is itself reported as the warning, never raised.
    """
    from gspo_trl.plan.topology import resolve_topology
    from gspo_trl.plan.verdict import DOES_NOT_FIT

    header = read_header(recipe.source)
    hardware = header.hardware
    if hardware is None or not _plannable_offline(recipe.model.name_or_path):
        return None
    stated = f"{hardware.nodes} node(s) x {hardware.gpus_per_node} x {hardware.gpu_memory_gb:g} GB"
    try:
        result = plan_recipe(recipe, resolve_topology(recipe.training, header), header)
    except PlanError as error:
        return f"warning: the header's hardware ({stated}) cannot be planned: {error}"
    verdict = result.plan.verdict
    if verdict.status != DOES_NOT_FIT:
        return None
    return (
        f"warning: does not fit the header's hardware ({stated}) per `gspo-trl plan`: peak "
        f"{verdict.peak_bytes / 2**30:.0f} GiB per GPU, mostly {verdict.dominant.name}; "
        f"first fix: {verdict.fix}"
    )
