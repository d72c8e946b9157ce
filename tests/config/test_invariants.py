"""GSPO's invariants (gspo_trl.config.invariants): each one refused with the same message
through a recipe (`gspo-trl validate`/`train`) and through the Python API (`GSPOConfig`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.validation import validate
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.config import GSPOConfig
from tests._paths import ROOT

RECIPE = """\
model: {name_or_path: tiny}
data: {path: synthetic:reversal, solution_column: solution}
rewards: [gspo_trl.data.synthetic:digit_reversal_reward]
per_device_train_batch_size: 8
num_generations: 4
"""

INVARIANTS = [
    # (invariant, recipe overrides, GSPOConfig keyword arguments, words the message must hold)
    (
        "GSPO-token needs token-level ratios",
        {"algorithm": "gspo_token", "importance_sampling_level": "sequence"},
        {"gspo_token": True},
        "GSPO-token builds the sequence ratio on TRL's token path",
    ),
    (
        "token-level ratios need a token-level clip range",
        {"algorithm": "grpo", "epsilon": "3e-4", "epsilon_high": "4e-4"},
        {"importance_sampling_level": "token"},  # was accepted silently: GRPO with GSPO's clip
        "0.0003 / 0.0004 is a sequence-level clip range",
    ),
    (
        "GSPO needs off-policy updates",
        {"steps_per_generation": "1"},
        {"steps_per_generation": 1},
        "every update is on-policy",
    ),
    ("no token-sum loss under GSPO", {"loss_type": "dapo"}, {"loss_type": "dapo"}, "sums over tokens"),
    (
        "clip half-widths in (0, 1)",
        {"epsilon_high": "1.5"},
        {"epsilon_high": 1.5},
        "epsilon_high: 1.5 must be strictly between 0 and 1",
    ),
    (
        "a ratio level TRL knows",
        {"importance_sampling_level": "tokens"},
        {"importance_sampling_level": "tokens"},
        "'tokens' is not 'token' or 'sequence'",
    ),
]


def recipe_error(tmp_path: Path, overrides: dict[str, str]) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent(RECIPE), encoding="utf-8")
    with pytest.raises(RecipeError) as caught:
        validate(load_recipe(path, overrides), processes=1)
    return str(caught.value)


def config_error(tmp_path: Path, kwargs: dict) -> str:
    with pytest.raises(RecipeError) as caught:
        GSPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", **kwargs)
    return str(caught.value)


@pytest.mark.parametrize(
    ("invariant", "overrides", "kwargs", "words"), INVARIANTS, ids=[row[0] for row in INVARIANTS]
)
def test_each_invariant_is_refused_identically_by_recipe_and_gspo_config(
    tmp_path: Path, invariant: str, overrides: dict, kwargs: dict, words: str
) -> None:
    from_recipe = recipe_error(tmp_path, overrides)
    assert words in from_recipe, invariant
    assert config_error(tmp_path, kwargs) == from_recipe


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (
            {"importance_sampling_level": "token"},
            "gives token-level ratios, i.e. GRPO, while algorithm is gspo",
        ),
        ({"algorithm": "grpo", "importance_sampling_level": "sequence"}, "'sequence' is GSPO"),
    ],
)
def test_a_recipe_naming_the_wrong_algorithm_is_refused(tmp_path: Path, overrides: dict, words: str) -> None:
    """Only a recipe names its algorithm; a GSPOConfig's follows from its settings (`algorithm_of`)."""
    assert words in recipe_error(tmp_path, overrides)


def test_what_the_invariants_allow(tmp_path: Path) -> None:
    run = str(tmp_path / "run")
    grpo = GSPOConfig(
        output_dir=run, use_cpu=True, importance_sampling_level="token", epsilon=0.2, epsilon_high=0.28
    )
    assert grpo.algorithm == "grpo"
    token = GSPOConfig(output_dir=run, use_cpu=True, importance_sampling_level="token", gspo_token=True)
    assert token.algorithm == "gspo_token"


def test_docs_state_the_clip_level_boundary_the_code_uses() -> None:
    """docs/gspo.md names TOKEN_LEVEL_CLIP three times (refusal table, warning, diagnostics)."""
    import re

    from gspo_trl.config.invariants import TOKEN_LEVEL_CLIP

    text = (ROOT / "docs" / "gspo.md").read_text(encoding="utf-8")
    stated = re.findall(
        r"below ([\d.]+) \||range of ([\d.]+) or more|epsilon_high` of ([\d.]+) or more", text
    )
    values = [float(next(v for v in groups if v)) for groups in stated]
    assert len(values) == 3 and set(values) == {TOKEN_LEVEL_CLIP}
