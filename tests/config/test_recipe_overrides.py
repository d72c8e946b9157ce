"""Keys from other tools point to ours; recipe imports register rewards; one reward field from argv."""

from __future__ import annotations

import re
import sys

import pytest

from tests._gspo_helpers import single_torch_thread  # noqa: F401  (fixture: one torch thread)


@pytest.mark.parametrize(
    ("key", "value", "points_to"),
    [
        ("dataset_name", "openai/gsm8k", "data.path"),
        ("torch_dtype", "bfloat16", "model.dtype"),
        ("model_name_or_path", "Qwen/Qwen3-0.6B", "model.name_or_path"),
        ("reward_funcs", ["math"], "rewards"),
        (
            "resume_from_checkpoint",
            "runs/x/checkpoint-10",
            "the command line: gspo-trl train RECIPE --resume",
        ),
    ],
)
def test_trl_and_open_r1_keys_point_to_the_recipe_key(key, value, points_to) -> None:
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.core.errors import RecipeError

    with pytest.raises(RecipeError, match=rf"{key!r} is not a recipe key here: use {re.escape(points_to)}"):
        load_recipe(None, {key: value})


def test_recipe_imports_register_custom_rewards(tmp_path, monkeypatch, capsys) -> None:
    """`imports: [pkg.module]` is imported (cwd on sys.path) before the rewards resolve, and
    `rewards list --import` shows what it registers."""
    from gspo_trl import rewards
    from gspo_trl.cli.main import main as gspo_trl_main
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.config.validation import validate

    package = f"myrewards_{tmp_path.name.replace('-', '_')}"
    reward_name = f"numeric_{package}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "numeric.py").write_text(
        "from gspo_trl import rewards\n\n"
        f"@rewards.register({reward_name!r})\n"
        "def numeric(completions, solution, **_):\n"
        '    """1.0 when the completion is the solution."""\n'
        "    return [float(c.strip() == s) for c, s in zip(completions, solution)]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    recipe = load_recipe(
        None,
        {"imports": [f"{package}.numeric"], "rewards": [reward_name], "data.solution_column": "solution"},
    )
    validate(recipe, processes=1)
    assert rewards.get(reward_name)(["12", "3"], solution=["12", "4"]) == [1.0, 0.0]
    assert gspo_trl_main(["rewards", "list", "--import", f"{package}.numeric"]) == 0
    assert reward_name in capsys.readouterr().out

    from gspo_trl.core.errors import RecipeError

    with pytest.raises(RecipeError, match="imports: cannot import 'no_such_module_here'"):
        load_recipe(None, {"imports": ["no_such_module_here"]})


@pytest.mark.parametrize(
    ("overrides", "weights", "params"),
    [
        ({"rewards.1.weight": "0.5"}, [1.0, 0.5], [{}, {}]),
        ({"rewards.0.weight": "2", "rewards.1.label": "fmt"}, [2.0, 0.2], [{}, {"label": "fmt"}]),
    ],
)
def test_one_reward_field_from_the_command_line(overrides, weights, params) -> None:
    from gspo_trl.config.recipe import load_recipe

    base = {"rewards": ["math", {"name": "format", "weight": 0.2}]}
    recipe = load_recipe(None, {**base, **overrides})
    assert [entry.weight for entry in recipe.rewards] == weights
    assert [entry.params for entry in recipe.rewards] == params
    assert [entry.spec for entry in recipe.rewards] == ["math", "format"]


@pytest.mark.parametrize(
    ("key", "message"),
    [("rewards.5.weight", "has 2 reward"), ("rewards.weight", "expected --rewards.INDEX.FIELD")],
)
def test_reward_override_names_what_is_wrong(key, message) -> None:
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.core.errors import RecipeError

    with pytest.raises(RecipeError, match=message):
        load_recipe(None, {"rewards": ["math", "format"], key: "0.5"})
