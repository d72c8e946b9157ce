"""The whole run's hours and cost: the parts add up, they scale as the per-batch model says, the
price is named and overridable, and the recipe's stated time is compared on its own hardware."""

from __future__ import annotations

import re

import pytest

from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.sections import LaunchConfig
from gspo_trl.config.shipped import find_shipped
from gspo_trl.plan import PlanError
from gspo_trl.plan.gpu_prices import GPU_TYPES, find_gpu
from gspo_trl.plan.planner import plan
from gspo_trl.plan.recipe_plan import plan_recipe
from gspo_trl.plan.run_time import run_time
from gspo_trl.plan.topology import resolve_topology

RECIPE = "qwen3-1.7b/math"
TRAINING = {"max_prompt_length": 512, "max_completion_length": 1024, "gradient_checkpointing": True}


def whole_run(
    gpus: int, max_steps: int, per_device: int = 8, accumulation: int = 4, steps_per_generation: int = 8
):
    training = {
        **TRAINING,
        "per_device_train_batch_size": per_device,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": steps_per_generation,
        "num_generations": 8,
    }
    result = plan(training, "Qwen/Qwen3-1.7B", strategy="zero2", gpus_per_node=gpus)
    return run_time(result, max_steps, None, gpus)


def run_plan(capsys, *argv: str) -> tuple[int, str]:
    code = gspo_trl_main(["plan", *argv])
    return code, capsys.readouterr().out


@pytest.mark.parametrize(("gpus", "max_steps"), [(1, 10), (1, 400), (8, 400), (8, 7)])
def test_parts_add_up_to_the_total(gpus, max_steps):
    run = whole_run(gpus, max_steps)
    assert run.seconds == pytest.approx(sum(part.count * part.seconds_each for part in run.parts))
    assert run.hours == pytest.approx(run.seconds / 3600)
    assert run.rollout_batches == -(-max_steps // 2)  # 8 micro-batches / 4 accumulation = 2 updates
    assert run.parts[0].name == "rollout generation" and run.parts[0].seconds_each > 0


@pytest.mark.parametrize("gpus", [1, 4])
def test_doubling_the_steps_doubles_the_hours(gpus):
    assert whole_run(gpus, 400).hours == pytest.approx(2 * whole_run(gpus, 200).hours)


# The same 512-completion rollout batch and 2 updates per batch on 1, 2, 4, 8 GPUs.
SAME_BATCH = [(1, 8, 32, 64), (2, 8, 16, 32), (4, 8, 8, 16), (8, 8, 4, 8)]


def test_more_gpus_take_fewer_hours_for_the_same_batch():
    runs = [whole_run(gpus, 100, per, acc, spg) for gpus, per, acc, spg in SAME_BATCH]
    hours = [run.hours for run in runs]
    assert hours == sorted(hours, reverse=True) and len(set(hours)) == len(hours)
    # the FLOP parts divide perfectly over the GPUs; GPU-hours of updates stay the same
    updates = [run.parts[3].seconds * gpus for run, (gpus, *_) in zip(runs, SAME_BATCH, strict=True)]
    assert updates == pytest.approx([updates[0]] * len(updates))


def test_the_gpu_types_rates_time_the_work():
    recipe = load_recipe(find_shipped(RECIPE))
    h100 = plan_recipe(recipe, resolve_topology(recipe.training, recipe.launch))
    a10g = plan_recipe(
        recipe, resolve_topology(recipe.training, recipe.launch, gpu_type="A10G", gpu_memory_gb=80)
    )
    assert a10g.run.parts[3].seconds / h100.run.parts[3].seconds == pytest.approx(989.0 / 125.0)
    assert a10g.run.parts[0].seconds / h100.run.parts[0].seconds == pytest.approx(3.35 / 0.6)


LAUNCH = LaunchConfig(gpus_per_node=8, gpu_memory_gb=80, gpu_type="H100")


@pytest.mark.parametrize(
    ("launch", "flags", "gpu", "memory", "source"),
    [
        (LAUNCH, {}, "H100", 80, "launch.gpu_type"),
        (
            LaunchConfig(gpus_per_node=8, gpu_memory_gb=80, gpu_type="H100/A100"),
            {},
            "H100",
            80,
            "launch.gpu_type",
        ),
        (LAUNCH, {"gpu_memory_gb": 24}, "A10G", 24, "assumed from 24 GB; give --gpu-type"),
        (LAUNCH, {"gpu_type": "L40S"}, "L40S", 48, "--gpu-type"),
        (LAUNCH, {"gpu_type": "rtx 4090"}, "RTX4090", 24, "--gpu-type"),
        (LAUNCH, {"gpu_memory_gb": 32}, "H100", 32, "assumed, no row of 32 GB; give --gpu-type"),
        (
            LaunchConfig(gpus_per_node=8, gpu_memory_gb=141),
            {},
            "H200",
            141,
            "assumed from 141 GB; give --gpu-type",
        ),
        (None, {}, "H100", 80, "assumed from 80 GB; give --gpu-type"),
    ],
)
def test_gpu_type_precedence(launch, flags, gpu, memory, source):
    topology = resolve_topology({}, launch, **flags)
    assert (topology.gpu.name, topology.gpu_memory_gb, topology.sources["gpu_type"]) == (gpu, memory, source)


def test_an_unknown_gpu_type_is_refused_with_the_known_ones():
    with pytest.raises(PlanError, match=r"--gpu-type 'B200'.*H100, H200"):
        resolve_topology({}, LAUNCH, gpu_type="B200")


def test_every_row_names_its_source_and_date():
    for gpu in GPU_TYPES:
        assert re.search(r"as of \d{4}-\d{2}", gpu.price_source), gpu
        assert gpu.rates_source and gpu.usd_per_gpu_hour > 0 and find_gpu(gpu.name) is gpu


def _cost(out: str) -> tuple[float, int, float, float, str]:
    """The first cost line: (dollars, GPUs, hours, price, source)."""
    match = re.search(
        r"  cost ~\$([\d,.]+) \((\d+) GPU\(s\) x ([\d.]+) h x \$([\d.]+)/GPU-h, price: (.+)\)\n", out
    )
    assert match, out
    usd, gpus, hours, price, source = match.groups()
    return float(usd.replace(",", "")), int(gpus), float(hours), float(price), source


@pytest.mark.parametrize("gpu", GPU_TYPES, ids=lambda gpu: gpu.name)
def test_the_price_and_its_source_are_printed(capsys, gpu):
    code, out = run_plan(capsys, RECIPE, "--gpu-type", gpu.name, "--gpu-memory", "80GB")
    assert code == 0, out
    usd, gpus, hours, price, source = _cost(out)
    assert (gpus, price) == (8, round(gpu.usd_per_gpu_hour, 2))
    assert gpu.price_source in source and "override with --gpu-price" in source
    assert usd == pytest.approx(gpus * hours * price, rel=0.01)


def test_gpu_price_overrides_the_table(capsys):
    _, table = run_plan(capsys, RECIPE)
    code, out = run_plan(capsys, RECIPE, "--gpu-price", "1.25")
    assert code == 0
    usd, gpus, hours, price, source = _cost(out)
    assert (gpus, price, source) == (8, 1.25, "--gpu-price for H100")
    assert usd == pytest.approx(gpus * hours * 1.25, rel=0.01)
    assert hours == _cost(table)[2]  # the price moves the cost, not the time


def test_a_bad_gpu_price_is_refused(capsys):
    assert gspo_trl_main(["plan", RECIPE, "--gpu-price", "0"]) == 2
    assert "--gpu-price 0.0: expected a positive USD per GPU-hour" in capsys.readouterr().err
