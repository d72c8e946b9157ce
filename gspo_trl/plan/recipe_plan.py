"""A plan for a whole recipe: its training keys on a topology, plus what only the recipe knows.

Beyond `plan(...)`'s memory and work, a recipe decides whether its batches divide at the
world size (TRL refuses a generation batch that does not hold whole groups), how many
optimizer updates each rollout batch feeds (GSPO needs >= 2, else every ratio is 1), both
from gspo_trl.config.batch; the held-out evaluation it runs (gspo_trl.plan.heldout_memory);
the whole run's hours and cost (gspo_trl.plan.run_time) at the GPU type's price or
`--gpu-price`; and the cost its `launch:` section states. That statement is for the `launch:`
hardware, so when the plan's hardware differs the recipe is planned there too (`header`) and
the report sets the two side by side, each labelled, rather than one hardware's time against
the other's floor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gspo_trl.config.batch import RolloutBatch, rollout_batch
from gspo_trl.config.recipe import Recipe
from gspo_trl.config.sections import LaunchConfig
from gspo_trl.core.errors import RecipeError
from gspo_trl.plan.gpu_prices import PRICE_NOTE
from gspo_trl.plan.heldout_memory import HeldoutLoad, heldout_load
from gspo_trl.plan.model_shape import ModelShape, PlanError, load_model_shape
from gspo_trl.plan.overlap import StepTime, step_time
from gspo_trl.plan.planner import Plan, plan
from gspo_trl.plan.run_time import Price, RunTime, run_time
from gspo_trl.plan.topology import Topology

TINY = "tiny"


@dataclass(frozen=True)
class RecipePlan:
    recipe: Recipe
    topology: Topology
    plan: Plan
    batch: RolloutBatch
    heldout: HeldoutLoad | None
    run: RunTime | None = None
    """The whole run's floor; None without a positive max_steps."""
    price: Price | None = None
    header: RecipePlan | None = None
    """The same recipe on its `launch:` hardware, when that differs from this plan's."""
    step: StepTime | None = None
    """One rollout batch's synchronous and overlapped step time (gspo_trl.plan.overlap)."""

    @property
    def batch_problem(self) -> str | None:
        """Why TRL would refuse this rollout batch at this world size; None when it divides."""
        return self.batch.groups_problem()

    @property
    def launch(self) -> LaunchConfig | None:
        return self.recipe.launch


def tiny_shape() -> ModelShape:
    """The locally built CPU model's shape (gspo_trl.model.tiny.dense), without building it."""
    from gspo_trl.model.tiny.dense import TinyModelSpec

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


def price_of(topology: Topology, gpu_price: float | None = None) -> Price:
    """`--gpu-price` when given, else the GPU type's row of gspo_trl.plan.gpu_prices, source named."""
    if gpu_price is not None:
        if not gpu_price > 0:
            raise PlanError(f"--gpu-price {gpu_price!r}: expected a positive USD per GPU-hour")
        return Price(float(gpu_price), f"--gpu-price for {topology.gpu.name}")
    gpu = topology.gpu
    return Price(gpu.usd_per_gpu_hour, f"{gpu.name}: {gpu.price_source}; {PRICE_NOTE}")


def _same_hardware(one: Topology, other: Topology) -> bool:
    fields = ("nodes", "gpus_per_node", "gpu_memory_gb", "strategy", "gpu")
    return all(getattr(one, name) == getattr(other, name) for name in fields)


def header_topology(recipe: Recipe) -> Topology | None:
    """The recipe's own `launch:` hardware (no flags); None for a CPU recipe."""
    from gspo_trl.plan.topology import resolve_topology

    launch = recipe.launch
    if launch is None or not launch.gpus:
        return None
    return resolve_topology(recipe.training, launch)


def plan_recipe(
    recipe: Recipe,
    topology: Topology,
    gpu_price: float | None = None,
    with_header: bool = True,
    training: dict[str, Any] | None = None,
) -> RecipePlan:
    """Plan `recipe` on `topology` (gspo_trl.plan.topology.resolve_topology); `gpu_price` (USD
    per GPU-hour) prices this topology's GPUs; `with_header` also plans the `launch:` hardware
    when it differs (its price is `gpu_price` only for the same GPU type); `training`, when
    given, replaces the recipe's keys on this topology only (gspo_trl.plan.changes)."""
    original = recipe
    if training is not None:
        recipe = replace(recipe, training=training)
    batch = rollout_batch(recipe.training, topology.world_size, allow_partial_groups=True)
    gpu = topology.gpu
    try:
        result = plan(
            {**recipe.training, "packing": recipe.packing},
            recipe_shape(recipe),
            strategy=topology.strategy,
            nodes=topology.training_nodes,
            gpus_per_node=topology.gpus_per_node,
            gpu_memory_gb=topology.gpu_memory_gb,
            lora=recipe.model.lora,
            dtype=recipe.model.dtype,
            allow_pure_bf16=recipe.model.allow_pure_bf16,
            peak_tflops=gpu.bf16_dense_tflops,
            bandwidth_tb_s=gpu.bandwidth_tb_s,
            gpu_name=gpu.name,
            max_staleness=recipe.engine.max_staleness,
        )
    except PlanError as error:
        raise PlanError(f"recipe {recipe.source}: {error}") from None
    heldout = heldout_load(recipe, result)
    max_steps = int(recipe.training.get("max_steps") or -1)
    run = run_time(result, max_steps, heldout, topology.total_gpus) if max_steps > 0 else None
    header = None
    own = header_topology(recipe) if with_header else None
    if own is not None and not _same_hardware(own, topology):
        own_price = gpu_price if own.gpu == topology.gpu else None
        header = plan_recipe(original, own, own_price, with_header=False)
    price = price_of(topology, gpu_price)
    launch = recipe.launch
    step = step_time(
        result.shape,
        result.setup,
        result.throughput,
        launch.server_tensor_parallel_size if launch is not None else None,
        launch.server_data_parallel_size if launch is not None else None,
    )
    return RecipePlan(recipe, topology, result, batch, heldout, run, price, header, step)


def _plannable_offline(name: str) -> bool:
    """A shipped config or a local directory with config.json: a plan that needs no download."""
    from pathlib import Path

    from gspo_trl.plan.model_shape import shipped_models

    lowered = {hub_id.lower() for hub_id in shipped_models()}
    local = Path(name).expanduser()
    return name.lower() in lowered or (local.is_dir() and (local / "config.json").is_file())


def launch_hardware_warning(recipe: Recipe) -> str | None:
    """One line when the recipe's own `launch:` hardware does not fit per the plan; else None.

    Only for recipes whose `launch:` states GPUs and whose model plans offline; a plan input
    that cannot work is itself reported as the warning, never raised.
    """
    from gspo_trl.plan.topology import resolve_topology
    from gspo_trl.plan.verdict import DOES_NOT_FIT

    launch = recipe.launch
    if launch is None or not launch.gpus or not _plannable_offline(recipe.model.name_or_path):
        return None
    try:
        topology = resolve_topology(recipe.training, launch)
        stated = f"{topology.nodes} node(s) x {topology.gpus_per_node} x {topology.gpu_memory_gb:g} GB"
        result = plan_recipe(recipe, topology)
    except (PlanError, RecipeError) as error:
        return f"warning: the `launch:` hardware cannot be planned: {error}"
    verdict = result.plan.verdict
    if verdict.status != DOES_NOT_FIT:
        return None
    return (
        f"warning: does not fit the `launch:` hardware ({stated}) per `gspo-trl plan`: peak "
        f"{verdict.peak_bytes / 2**30:.0f} GiB per GPU, mostly {verdict.dominant.name}; "
        f"first fix: {verdict.fix}" + (f" ({verdict.fix_flags})" if verdict.fix_flags else "")
    )
