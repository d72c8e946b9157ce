"""The Python API trains as a recipe does (gspo_trl.training.api_defaults, issue 35 item 3).

TRL's GRPO quickstart, with only its import changed to gspo_trl (and the hub ids pointed at a
local tiny model and a local copy of the data), runs on CPU and trains GSPO; a bare
`GSPOConfig(output_dir=...)` works on a CPU machine; a plain `GRPOConfig` that is not GSPO is
refused naming its fields; a reward name resolves through the registry, not the hub.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import metadata
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig

from gspo_trl import GSPO_DEFAULTS, GSPOConfig, GSPOTrainer, RecipeError
from gspo_trl.model.loading.precision import cpu_mixed_precision
from gspo_trl.training.api_defaults import check_plain_grpo_config, resolve_reward_funcs
from gspo_trl.training.reporting.console_lines import ConsoleCallback
from tests._gspo_helpers import single_torch_thread, tiny_model_dir  # noqa: F401 - autouse fixture

ROOT = Path(__file__).resolve().parents[2]


def trl_grpo_quickstart() -> str:
    """The `GRPOTrainer` example of the installed TRL's README, verbatim."""
    readme = metadata("trl").get_payload()
    section = readme[readme.index("### `GRPOTrainer`") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_trl_quickstart_runs_unchanged_but_for_the_import(tmp_path) -> None:
    """On CPU, no config: GSPO's settings, the console line, metrics.jsonl in the default output dir."""
    script = trl_grpo_quickstart()
    ported = script.replace("from trl import GRPOTrainer", "from gspo_trl import GSPOTrainer")
    ported = ported.replace("GRPOTrainer(", "GSPOTrainer(")
    model_dir = tiny_model_dir(tmp_path)
    ported = re.sub(r'model="[^"]+"', f'model="{model_dir}"', ported)  # no hub: the local tiny model
    ported = ported.replace(
        'load_dataset("trl-lib/DeepMath-103K"', 'load_dataset("json", data_files="math.jsonl"'
    )
    assert ported.count("\n") == script.count("\n")  # the same lines, only the names changed
    rows = [
        {"prompt": [{"role": "user", "content": f"What is {i} + 2?"}], "solution": str(i + 2)}
        for i in range(4)
    ]
    (tmp_path / "math.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "quickstart.py").write_text(ported)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    result = subprocess.run(
        [sys.executable, "quickstart.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sequence-level ratio, eps 0.0003/0.0004" in result.stdout  # the banner: GSPO, not TRL's
    assert re.search(r"^step 10/12 \| reward ", result.stdout, re.M), result.stdout[
        -2000:
    ]  # logging_steps 10
    assert "done: 12 steps" in result.stdout  # 4 rows x 3 epochs, one prompt's group per step
    metrics = tmp_path / "tiny-GSPO" / "metrics.jsonl"
    logged = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert any("rewards/accuracy_reward/mean" in entry for entry in logged)


def test_gspo_config_on_a_cpu_machine_needs_no_precision_flags(tmp_path) -> None:
    config = GSPOConfig(output_dir=str(tmp_path))
    if not torch.cuda.is_available():
        assert (config.bf16, config.use_cpu) == (False, True)
        assert GSPOConfig(output_dir=str(tmp_path), bf16=True).bf16  # as a recipe's `bf16: true`


@pytest.mark.parametrize(
    ("bf16", "use_cpu", "gpu", "expected"),
    [
        (None, None, False, (False, True)),  # nothing set, no GPU: a CPU run in fp32
        (True, None, False, (True, True)),  # bf16 asked for on CPU: kept (autocast)
        (None, None, True, (None, False)),  # GPU: TRL's default (bf16 on) stays
        (None, True, True, (False, True)),  # CPU asked for on a GPU machine: fp32
        (False, False, False, (False, False)),  # everything explicit: as given
    ],
)
def test_cpu_mixed_precision_rule(bf16, use_cpu, gpu, expected) -> None:
    assert cpu_mixed_precision(bf16, use_cpu, gpu) == expected


def test_the_recipe_path_uses_the_same_rule() -> None:
    """build.gspo_config leaves bf16/use_cpu unset unless the recipe sets them: GSPOConfig decides."""
    source = (ROOT / "gspo_trl" / "training" / "build.py").read_text()
    assert 'training["bf16"]' not in source and 'training["use_cpu"]' not in source


def test_no_args_is_gspo(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    model_dir = tiny_model_dir(tmp_path)
    dataset = Dataset.from_list([{"prompt": f"add {i}"} for i in range(8)])
    trainer = GSPOTrainer(str(model_dir), "format", train_dataset=dataset)
    assert {key: getattr(trainer.args, key) for key in GSPO_DEFAULTS} == dict(GSPO_DEFAULTS)
    assert isinstance(trainer.args, GSPOConfig)
    assert trainer.args.output_dir.endswith("tiny-GSPO")
    assert trainer.reward_func_names == ["format"]
    assert sum(isinstance(c, ConsoleCallback) for c in trainer.callback_handler.callbacks) == 1


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({}, ["importance_sampling_level='token'", "loss_type='dapo'", "epsilon=0.2", "on-policy"]),
        ({"importance_sampling_level": "sequence", "loss_type": "grpo"}, ["epsilon=0.2", "on-policy"]),
        ({**GSPO_DEFAULTS, "beta": 0.04}, ["beta=0.04"]),
    ],
)
def test_plain_grpo_config_that_is_not_gspo_is_refused(tmp_path, fields, named) -> None:
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **fields)
    with pytest.raises(RecipeError) as refused:
        check_plain_grpo_config(config)
    message = str(refused.value)
    assert "\n" not in message and "GSPOConfig" in message
    for text in named:
        assert text in message


def test_plain_grpo_config_with_gspo_settings_is_accepted(tmp_path) -> None:
    check_plain_grpo_config(GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **GSPO_DEFAULTS))


def test_reward_names_resolve_through_the_registry() -> None:
    resolved = resolve_reward_funcs("math")
    assert [getattr(func, "__name__", None) for func in resolved] == ["math"]
    assert callable(resolved[0])
    kept = resolve_reward_funcs(["format", "org/reward-model"])
    assert kept[1] == "org/reward-model"  # a hub id stays TRL's reward model
    with pytest.raises(ValueError, match="did you mean"):
        resolve_reward_funcs("mathh")
