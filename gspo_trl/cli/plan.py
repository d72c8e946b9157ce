"""`gspo-trl plan RECIPE [--accelerate-config ACCELERATE_YAML] [--nodes N] [--gpus-per-node G]
[--gpu-memory 80GB] [--gpu-type H100] [--gpu-price USD] [--key value ...]`: will the recipe fit
its GPUs, what dominates, what to change first, how many hours and dollars the run takes.

Arithmetic only (gspo_trl.plan): no GPU, no download; the model's shape comes from a shipped
config (Qwen3 0.6B-32B, 30B-A3B) or a local directory with config.json. For a shipped recipe
no flag is needed: its `launch:` section gives the topology and the strategy.
A recipe `validate` refuses is refused here first, with validate's lines (no plan of a run
that cannot start). Exit status: 0 fits or tight, 1 does not fit, 2 bad input. `--config` is an
old spelling of `--accelerate-config` (accepted with a warning: for `train` it names the recipe).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.core.errors import RecipeError

USAGE = (
    "gspo-trl plan RECIPE [--accelerate-config ACCELERATE_YAML] [--nodes N] [--gpus-per-node G] "
    "[--gpu-memory 80GB] [--gpu-type H100] [--gpu-price USD_PER_GPU_HOUR] [--key value ...]"
)


def parser() -> argparse.ArgumentParser:
    parse = ArgumentParser(
        prog="gspo-trl plan", usage=USAGE, description=__doc__, allow_abbrev=False, add_help=True
    )
    parse.add_argument("recipe", nargs="?")
    parse.add_argument(
        "--accelerate-config", metavar="ACCELERATE_YAML", help="accelerate config (strategy, processes)"
    )
    parse.add_argument("--config", dest="old_config", help=argparse.SUPPRESS)  # the old spelling
    parse.add_argument("--nodes", type=int, help="all nodes, a vLLM server node included")
    parse.add_argument("--gpus-per-node", type=int)
    parse.add_argument("--gpu-memory", help="per GPU, e.g. 80GB (default: launch.gpu_memory_gb, else 80GB)")
    parse.add_argument(
        "--gpu-type",
        help="H100, H200, A100-80GB, A100-40GB, L40S, A10G, RTX4090: its rates and price "
        "(default: launch.gpu_type, else the first of --gpu-memory's size)",
    )
    parse.add_argument(
        "--gpu-price",
        type=float,
        metavar="USD_PER_GPU_HOUR",
        help="price of one of the plan's GPUs for an hour (default: the GPU type's row, docs/plan.md)",
    )
    return parse


OLD_CONFIG_WARNING = (
    "warning: `gspo-trl plan --config` is now --accelerate-config (for `gspo-trl train`, --config "
    "names the recipe); --config still works here for now"
)


def accelerate_config_of(args: argparse.Namespace) -> str | None:
    """--accelerate-config, or the old --config with a warning; both at once is refused."""
    if args.old_config is None:
        return args.accelerate_config
    if args.accelerate_config is not None:
        raise RecipeError("give --accelerate-config only (--config is its old spelling)")
    print(OLD_CONFIG_WARNING, file=sys.stderr)
    return args.old_config


DYNAMIC_TOKENS = (2.4, 2.9)
"""Generated tokens with sampling.dynamic over without, at max_rounds 3: docs/dynamic-sampling.md's
table (49,088 / 20,812 on the demo task, 69,695 / 24,279 on the long one)."""


def dynamic_sampling_note(max_rounds: int) -> str:
    """The plan's times are one generation round per rollout batch; dynamic sampling runs up to
    `max_rounds`, and gathers each round's kept rows from every rank."""
    low, high = DYNAMIC_TOKENS
    return (
        f"dynamic sampling: the generation times above are one round; each rollout batch runs up to "
        f"{max_rounds} (sampling.max_rounds), and docs/dynamic-sampling.md measured {low}-{high}x the "
        "generated tokens at 3; every rank also receives the kept rows of all ranks (one rollout "
        "batch of rows, with routing replay its expert ids) before keeping its share"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args, overrides = parser().parse_known_args(list(argv or []))
    if args.recipe is None:
        raise RecipeError(f"no recipe given: {USAGE}")
    accelerate_config = accelerate_config_of(args)
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.plan.changes import (
        BATCH_KEYS,
        KeptBatch,
        change_lines,
        keep_rollout_batch,
        launch_command,
        named_keys,
    )
    from gspo_trl.plan.launch import parse_gpu_memory
    from gspo_trl.plan.recipe_plan import header_topology, plan_recipe
    from gspo_trl.plan.recipe_report import format_recipe_plan
    from gspo_trl.plan.topology import resolve_topology
    from gspo_trl.plan.verdict import DOES_NOT_FIT

    recipe = load_recipe(args.recipe, overrides, partial=True)
    from gspo_trl.config.validation import find_problems

    find_problems(recipe, installed=False).raise_if_any()  # validate's refusals, in its words
    memory = parse_gpu_memory(args.gpu_memory) if args.gpu_memory is not None else None
    topology = resolve_topology(
        recipe.training,
        recipe.launch,
        accelerate_config,
        args.nodes,
        args.gpus_per_node,
        memory,
        args.gpu_type,
    )
    named = named_keys(list(argv or []))
    own = header_topology(recipe)
    kept = KeptBatch(recipe.training)
    if own is not None and not named & set(BATCH_KEYS):
        kept = keep_rollout_batch(recipe.training, own, topology)
    result = plan_recipe(recipe, topology, args.gpu_price, training=kept.training)
    report = format_recipe_plan(result).split("\n")
    print("\n".join([report[0], *change_lines(topology, named, kept.note), *report[1:]]))
    if recipe.sampling.dynamic:
        print(dynamic_sampling_note(recipe.sampling.max_rounds))
    config = accelerate_config or (recipe.launch.accelerate_config if recipe.launch else None)
    extra = [*overrides, *(f"--{key} {value}" for key, value in kept.overrides.items())]
    own_command = recipe.launch.command if recipe.launch is not None else None
    if own_command and own is not None and own == topology and not extra:
        print(f"\nLaunch (the recipe's launch.command): {own_command}")
    else:
        launch = recipe.launch
        server = (
            (launch.server_tensor_parallel_size, launch.server_data_parallel_size) if launch else (None, None)
        )
        print(f"\nLaunch: {launch_command(recipe.source, topology, config, extra, server)}")
    if result.plan.verdict.status == DOES_NOT_FIT and result.plan.verdict.fix_flags:
        print(
            f"  (it does not fit as planned: add the first fix's overrides, {result.plan.verdict.fix_flags})"
        )
    if result.batch_problem:
        raise RecipeError(f"{recipe.source}: {result.batch_problem}")
    return 1 if result.plan.verdict.status == DOES_NOT_FIT else 0
