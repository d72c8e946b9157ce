"""Weights precision: bfloat16 weights without fp32 masters lose lr-1e-6 updates, so they are upcast.

Plain DDP (configs/ddp.yaml) keeps no fp32 master copy; `gspo_config` therefore loads a
bfloat16 `model.dtype` as float32 (bf16 autocast does the matmuls) unless DeepSpeed keeps
masters (accelerate sets ACCELERATE_USE_DEEPSPEED=true for DeepSpeed configs), the model is
LoRA (fp32 adapters over a frozen base), or the recipe opts in with model.allow_pure_bf16.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.build import gspo_config
from tests._gspo_helpers import single_torch_thread  # noqa: F401 (autouse fixture)
from tests._paths import ROOT
from tests._scripts import load_script

LORA = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}


@pytest.mark.parametrize(
    ("model", "deepspeed", "expected", "warns"),
    [
        ({"dtype": "bfloat16"}, None, "float32", True),
        ({"dtype": "bfloat16"}, "false", "float32", True),
        ({"dtype": "bfloat16"}, "true", "bfloat16", False),  # ZeRO keeps fp32 masters
        ({"dtype": "bfloat16", "allow_pure_bf16": True}, None, "bfloat16", False),
        ({"dtype": "bfloat16", "lora": LORA}, None, "bfloat16", False),  # adapters are fp32
        ({"dtype": "float32"}, None, "float32", False),
        ({"dtype": "float16"}, None, "float16", False),
        ({}, None, None, False),
    ],
)
def test_bfloat16_weights_are_upcast_where_no_fp32_master_exists(
    model: dict[str, Any],
    deepspeed: str | None,
    expected: str | None,
    warns: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    if deepspeed is None:
        monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", deepspeed)
    overrides = {f"model.{key}": value for key, value in model.items()}
    recipe = load_recipe(None, {**overrides, "rewards": ["math"], "output_dir": str(tmp_path)})
    validate(recipe, processes=1)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)  # TrainingArguments would set up DeepSpeed
    with caplog.at_level(logging.INFO, logger="gspo_trl"):
        if deepspeed == "true":
            from gspo_trl.training import build

            monkeypatch.setattr(build, "_deepspeed_launch", lambda recipe: True)
        config = gspo_config(recipe)
    assert config.model_init_kwargs.get("dtype") == expected
    # on a GPU a warning that names model.allow_pure_bf16; on CPU (no choice to make) one INFO line
    said = "model.allow_pure_bf16" in caplog.text or "bfloat16 is loaded as float32" in caplog.text
    assert said == warns, caplog.text


def test_the_ddp_recipe_trains_fp32_weights_under_bf16_autocast(monkeypatch: pytest.MonkeyPatch) -> None:
    """recipes/qwen3-0.6b/math.yaml (configs/ddp.yaml): fp32 weights, bf16 autocast kept on."""
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    config = gspo_config(load_recipe(ROOT / "recipes" / "qwen3-0.6b" / "math.yaml"))
    assert config.model_init_kwargs["dtype"] == "float32"
    assert config.bf16 is True


def test_allow_pure_bf16_without_bfloat16_weights_is_refused() -> None:
    recipe = load_recipe(None, {"model.dtype": "float32", "model.allow_pure_bf16": True, "rewards": ["math"]})
    with pytest.raises(RecipeError, match=r"model.allow_pure_bf16: true keeps bfloat16 weights.*'float32'"):
        validate(recipe, processes=1)


def test_pure_bf16_weights_lose_most_updates_and_fp32_weights_keep_them() -> None:
    """scripts/bench_bf16_updates.py on 2 steps: AdamW at lr 1e-6 moves few bf16 weights."""
    bench = load_script("bench_bf16_updates")
    tokenizer = bench.train_tokenizer(bench.default_corpus())
    pure, upcast = (bench.measure(setting, steps=2, tokenizer=tokenizer) for setting in bench.MODES)
    assert pure.setting.startswith("pure bf16") and upcast.setting.startswith("fp32 weights")
    assert pure.fraction_changed < 0.2 < 0.99 < upcast.fraction_changed, (pure, upcast)
    assert upcast.mean_abs_change > 10 * pure.mean_abs_change


def test_deepspeed_is_seen_from_the_training_key_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34 item 8: the `deepspeed` launcher sets no ACCELERATE_USE_DEEPSPEED; TrainingArguments'
    own `deepspeed` key still means DeepSpeed keeps fp32 master weights (no upcast)."""
    from gspo_trl.training.build import _deepspeed_launch

    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    base = {"rewards": ["math"]}
    assert not _deepspeed_launch(load_recipe(None, base))
    assert _deepspeed_launch(load_recipe(None, {**base, "deepspeed": "ds_zero2.json"}))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert _deepspeed_launch(load_recipe(None, base))
