"""The Python API is TRL's trainer/config pair with GSPO as the default.

`from gspo_trl import GSPOConfig, GSPOTrainer` must train like `GRPOTrainer`, with no
keyword beyond TRL's, and read back GSPO's settings from the trainer itself; `GSPOConfig`
refuses what would silently not be GSPO, as a recipe does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from datasets import Dataset
from transformers import AutoTokenizer

from gspo_trl import GSPO_DEFAULTS, GSPOConfig, GSPOTrainer, RecipeError, rewards
from tests._gspo_helpers import single_torch_thread, tiny_model_dir  # noqa: F401 - autouse fixture


def _config(tmp_path, **overrides) -> GSPOConfig:
    settings = dict(
        output_dir=str(tmp_path / "run"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        max_steps=2,
        logging_steps=1,
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=8,
        learning_rate=1e-4,
        seed=0,
    )
    return GSPOConfig(**{**settings, **overrides})


def test_gspo_trainer_trains_with_trl_style_arguments(tmp_path) -> None:
    model_dir = tiny_model_dir(tmp_path)
    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": f"What is {i} + 2?"}], "solution": str(i + 2)}
            for i in range(16)
        ]
    )
    trainer = GSPOTrainer(
        model=str(model_dir),
        args=_config(tmp_path),
        reward_funcs=[rewards.get("math")],
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    assert trainer.importance_sampling_level == GSPO_DEFAULTS["importance_sampling_level"] == "sequence"
    assert trainer.loss_type == GSPO_DEFAULTS["loss_type"] == "grpo"
    assert trainer.beta == GSPO_DEFAULTS["beta"] == 0.0
    assert (trainer.epsilon_low, trainer.epsilon_high) == (
        GSPO_DEFAULTS["epsilon"],
        GSPO_DEFAULTS["epsilon_high"],
    )
    assert trainer.args.steps_per_generation == GSPO_DEFAULTS["steps_per_generation"] == 4
    assert trainer.args.gradient_accumulation_steps == GSPO_DEFAULTS["gradient_accumulation_steps"] == 1
    assert trainer.ref_model is None
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(key.startswith("gspo/mb1/") for entry in trainer.state.log_history for key in entry)


def test_gspo_config_defaults_are_gspo_defaults(tmp_path) -> None:
    config = GSPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    assert {key: getattr(config, key) for key in GSPO_DEFAULTS} == dict(GSPO_DEFAULTS)


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"loss_type": "dapo"}, "loss_type"),
        ({"epsilon": 1.5}, "epsilon"),
        ({"steps_per_generation": 1}, "on-policy"),
        ({"gradient_accumulation_steps": 8, "num_iterations": 2}, "on-policy"),  # TRL skips pi_old here
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"gspo_token": True}, "gspo_token"),
        ({"diagnostics": {"length_buckets": [64, 8]}}, "length_buckets"),
    ],
)
def test_gspo_config_refuses_what_is_not_gspo(tmp_path, overrides, words) -> None:
    with pytest.raises(RecipeError, match=words):
        _config(tmp_path, **overrides)


def test_gspo_config_allows_what_is_asked_for(tmp_path) -> None:
    assert _config(tmp_path, steps_per_generation=1, allow_on_policy=True).steps_per_generation == 1
    token = _config(tmp_path, gspo_token=True, importance_sampling_level="token")
    assert token.algorithm == "gspo_token"
    assert _config(tmp_path, generation_batch_size=64).steps_per_generation == 8  # TRL derives it


def test_importing_the_package_is_cheap() -> None:
    """`import gspo_trl` (and reading a recipe) must not pull in torch or TRL."""
    code = (
        "import sys, gspo_trl; from gspo_trl.config.recipe import load_recipe; "
        "load_recipe('recipes/tiny/reversal.yaml'); "
        "print(sorted(m for m in ('torch', 'trl', 'transformers', 'datasets') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_every_exported_name_resolves() -> None:
    """`__all__` lists exactly the lazily imported names, and each one imports."""
    import gspo_trl

    assert sorted(gspo_trl.__all__) == sorted(gspo_trl._EXPORTS)
    for name in gspo_trl.__all__:
        value = getattr(gspo_trl, name)
        assert getattr(value, "__name__", name) == name, name  # GSPO_DEFAULTS is a mapping
