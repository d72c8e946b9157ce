"""gspo_trl.core.coercion: the one reading of user values (YAML, command-line text) as declared types,
used by recipe fields, reward parameters and overrides alike (table-driven)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, Literal

import pytest

from gspo_trl import rewards
from gspo_trl.config.fields import coerce as recipe_coerce
from gspo_trl.core.coercion import coerce
from gspo_trl.core.errors import FieldTypeError, RecipeError, ValueTypeError
from tests._paths import ROOT


class Colour(enum.Enum):
    RED = "red"


ACCEPTED = [
    # (value, annotation, result)
    ("4096", int, 4096),
    ("-3", int, -3),
    (3.0, int, 3),  # YAML `3.0`: an integral float is the int it names
    (7, float, 7.0),
    ("1e-6", float, 1e-6),  # YAML 1.1 reads 1e-6 as text
    ("0", float, 0.0),  # `--beta 0`: the number, never the truthy text "0"
    ("false", bool, False),
    ("on", bool, True),
    ("no", str, "no"),  # `--save_strategy no` stays text
    ("none", str | None, "none"),  # `report_to: none` is TRL's word, not None
    ("null", str | None, None),
    ("none", int | None, None),
    ("7", int | float, 7),
    ("2.5", int | float, 2.5),
    ("[1, 8]", list[int], [1, 8]),
    (["1", 2], list[int], [1, 2]),
    ([64, 256], tuple[int, ...], (64, 256)),
    ({"a": "2"}, dict[str, int], {"a": 2}),
    ("{a: 2}", dict[str, int], {"a": 2}),
    ("[a, b]", list[str] | None, ["a", "b"]),
    ("boxed", Literal["boxed", "any"], "boxed"),
    ("2", Literal[1, 2], 2),
    ("red", Colour, Colour.RED),
    ("runs/x", Path, Path("runs/x")),
    ({"x": [1]}, Any, {"x": [1]}),
]

REFUSED = [
    # (value, annotation, the one-line message)
    ("abc", int, "k: expected int, got 'abc'"),
    (1.5, int, "k: expected int, got the non-integral number 1.5"),
    (True, int, "k: expected int, got bool True"),
    (1, bool, "k: expected bool, got int 1"),
    (123, str, "k: expected str, got the number 123; quote it in YAML"),
    (False, str | None, "k: got the boolean False; YAML reads unquoted no/off/yes/on as booleans"),
    (None, int, "k: may not be null"),
    ([1], dict, "k: expected dict, got a list [1]"),
    ({"a": 1}, list, "k: expected list, got a mapping {'a': 1}"),
    ("[1, x]", list[int], "k[1]: expected int, got 'x'"),
    ("[1, 2", list[int], "k: expected list[int], got '[1, 2'"),
    ({"a": "x"}, dict[str, int], "k.a: expected int, got 'x'"),
    ("last_line", Literal["boxed", "any"], "k: expected 'boxed' or 'any', got 'last_line'"),
    ("x", int | None, "k: expected int or None, got 'x'"),
]


@pytest.mark.parametrize(("value", "annotation", "result"), ACCEPTED, ids=[repr(c[:2]) for c in ACCEPTED])
def test_values_are_read_as_their_declared_type(value, annotation, result) -> None:
    got = coerce(value, annotation, "k")
    assert got == result and type(got) is type(result)


@pytest.mark.parametrize(("value", "annotation", "message"), REFUSED, ids=[repr(c[:2]) for c in REFUSED])
def test_refusals_are_one_line_and_name_the_key(value, annotation, message) -> None:
    with pytest.raises(ValueTypeError) as caught:
        coerce(value, annotation, "k")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    with pytest.raises(FieldTypeError) as as_recipe:  # the recipe layer: same text, a RecipeError
        recipe_coerce(value, annotation, "k")
    assert str(as_recipe.value) == str(caught.value) and isinstance(as_recipe.value, RecipeError)


@pytest.mark.parametrize(
    ("spec", "params", "converted"),
    [
        ("soft_overlong", {"max_completion_len": "4096"}, {"max_completion_len": 4096}),
        ("cosine", {"max_len": "64", "min_value_wrong": "-2"}, {"max_len": 64, "min_value_wrong": -2.0}),
        ("math", {"reasoning_delimiters": "[</think>]", "timeout": 3}, None),
    ],
)
def test_reward_parameters_are_coerced_from_their_signature(spec, params, converted) -> None:
    """Command-line text reaches the reward as the type its signature declares."""
    got = rewards.validate_params(spec, params)
    if converted is not None:
        assert got == converted and all(type(got[k]) is type(v) for k, v in converted.items())
    else:
        assert got == {"reasoning_delimiters": ["</think>"], "timeout": 3.0}
    assert type(got.get("timeout", 0.0)) is float


def test_a_built_reward_gets_the_converted_value() -> None:
    fn = rewards.get("soft_overlong", max_completion_len="64", soft_punish_cache="16")
    assert (fn.max_len, fn.cache) == (64, 16) and type(fn.max_len) is int
    assert fn(completion_ids=[[0] * 56]) == [-0.5]


MATH_RECIPE = ROOT / "recipes" / "qwen3-1.7b" / "math.yaml"


def test_a_reward_parameter_override_reaches_the_reward_typed() -> None:
    """The documented override on the 1.7B recipe: validated, built, and saved as an int."""
    from gspo_trl.config.recipe import load_recipe, recipe_as_yaml
    from gspo_trl.config.validation import check_reward_construction, validate

    recipe = load_recipe(MATH_RECIPE, ["--rewards.1.max_completion_len", "4096"])
    validate(recipe, processes=8)
    check_reward_construction(recipe)
    entry = recipe.rewards[1]
    assert rewards.get(entry.spec, **entry.params).max_len == 4096
    assert "max_completion_len: 4096\n" in recipe_as_yaml(recipe)  # not the text '4096'


def test_a_bad_reward_parameter_override_is_refused_in_one_line() -> None:
    import subprocess
    import sys

    override = ["--rewards.1.max_completion_len", "abc"]
    result = subprocess.run(
        [sys.executable, "-m", "gspo_trl.cli.main", "validate", str(MATH_RECIPE), *override],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: rewards[1] (soft_overlong): reward 'soft_overlong': parameter 'max_completion_len': "
        "expected int, got 'abc'"
    ]
    assert "Traceback" not in result.stderr
