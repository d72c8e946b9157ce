"""One training process must see one GPU: refused before the model loads, with the fix.

TRL's GRPOTrainer raises "does not support `nn.DataParallel`" when `args.n_gpu > 1`, i.e. when
one process without a launcher sees several GPUs, but only after the model has loaded (minutes
for a 4B model). `check_one_gpu_per_process` is the same decision on the same quantity,
`TrainingArguments.n_gpu`, taken by `build_trainer` before the model loads. No GPU here, so the
device count is given to the decision directly; the test below pins it to TRL's own condition.
"""

from __future__ import annotations

import inspect
import re

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.preflight import check_one_gpu_per_process
from tests._paths import ROOT

RECIPE = "recipes/qwen3-4b/math-lora.yaml"


@pytest.mark.parametrize(
    ("n_gpu", "init_kwargs", "refused"),
    [
        (0, {}, False),  # CPU (use_cpu) or no CUDA
        (1, {}, False),  # one visible GPU, or any process under accelerate launch / torchrun
        (2, {}, True),
        (8, {"dtype": "bfloat16"}, True),
        (8, {"device_map": "auto"}, False),  # split over devices: Trainer resets n_gpu to 1
    ],
)
def test_several_gpus_in_one_process_are_refused(n_gpu, init_kwargs, refused):
    if not refused:
        check_one_gpu_per_process(n_gpu, RECIPE, init_kwargs)
        return
    with pytest.raises(RecipeError) as error:
        check_one_gpu_per_process(n_gpu, RECIPE, init_kwargs)
    message = str(error.value)
    assert "\n" not in message
    assert f"CUDA_VISIBLE_DEVICES=0 gspo-trl train {RECIPE}" in message
    assert f"accelerate launch --num_processes {n_gpu} -m gspo_trl.train --config {RECIPE}" in message


def test_the_decision_is_trls_own_condition():
    """GRPOTrainer refuses on `args.n_gpu > 1` (transformers sets n_gpu from the CUDA device count
    when no launcher ran; Trainer resets it to 1 for a model-parallel model): the check above
    decides on that very quantity. Fails when TRL changes the condition or its message."""
    from transformers import Trainer, TrainingArguments
    from trl import GRPOTrainer

    trl_init = inspect.getsource(GRPOTrainer.__init__)
    assert re.search(
        r"if args\.n_gpu > 1:\s+raise ValueError\(\s+f\"\{type\(self\)\.__name__\} does not support "
        r"`nn\.DataParallel`",
        trl_init,
    )
    assert "self._n_gpu = torch.cuda.device_count()" in inspect.getsource(
        TrainingArguments._setup_devices.func
    )
    assert re.search(
        r"if self\.is_model_parallel:\s+self\.args\._n_gpu = 1", inspect.getsource(Trainer.__init__)
    )


def test_build_trainer_checks_before_the_model_loads():
    """The check runs on the trainer's own args, before GSPOTrainer (the model load) is built."""
    from gspo_trl.training.build import build_trainer

    source = inspect.getsource(build_trainer)
    assert source.index("check_one_gpu_per_process(args.n_gpu") < source.index("GSPOTrainer(")


ONE_PROCESS_LAUNCH = re.compile(r"(?P<env>(?:[A-Z_]+=\S*\s+)*)gspo-trl train\s")


@pytest.mark.parametrize(
    "path", sorted((ROOT / "recipes").glob("**/*.yaml")), ids=lambda p: str(p.relative_to(ROOT / "recipes"))
)
def test_one_process_launch_lines_of_gpu_recipes_pin_one_gpu(path):
    """A plain `gspo-trl train` launch command of a GPU recipe names one device; fails on the
    4B LoRA recipe's old `gspo-trl train recipes/qwen3-4b/math-lora.yaml`."""
    launch = load_recipe(path).launch
    if launch is None or not launch.gpus_per_node:
        return
    launches = list(ONE_PROCESS_LAUNCH.finditer(launch.command or ""))
    if path.name == "math-lora.yaml":
        assert launches, "the one-GPU LoRA recipe's header should show its one-process launch"
    for launch in launches:
        env = dict(word.split("=", 1) for word in launch.group("env").split())
        assert re.fullmatch(r"\d+", env.get("CUDA_VISIBLE_DEVICES", "")), (path, launch.group(0))
