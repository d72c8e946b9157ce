"""The reward registry: names, paths, decorators, entry points, parameters, errors."""

from __future__ import annotations

import asyncio
import pickle
import sys
from pathlib import Path

import pytest

from gspo_trl import rewards
from gspo_trl.rewards import RewardParameterError, UnknownRewardError

BUILTINS = ["code", "cosine", "format", "math", "repetition", "soft_overlong", "tag_count", "think_format"]
ALIASES = {
    "accuracy": "math",
    "repetition_penalty": "repetition",
    "soft_overlong_punishment": "soft_overlong",
}


def test_every_builtin_is_listed_with_its_columns():
    infos = {info.name: info for info in rewards.available()}
    assert set(BUILTINS) <= set(infos)
    assert infos["math"].columns == ("solution",)
    assert infos["cosine"].columns == ("solution",)
    assert infos["code"].columns == ("tests",)
    assert infos["format"].columns == ()
    assert {p.name: p.default for p in infos["cosine"].parameters}["max_len"] == 1000
    assert all(
        info.summary and not info.summary.startswith("(") for n, info in infos.items() if n in BUILTINS
    )


@pytest.mark.parametrize(
    ("spec", "params", "expected_name"),
    [
        ("format", {}, "format"),
        ("cosine", {"max_len": 1024}, "cosine"),
        ("repetition", {"ngram_size": 2, "max_penalty": -0.5}, "repetition"),
        ("soft_overlong", {"max_completion_len": 256, "soft_punish_cache": 64}, "soft_overlong"),
        ("math", {"timeout": 3.0}, "math"),
        ("math", {"timeout": 3.0, "label": "math_strict"}, "math_strict"),
        ("accuracy", {}, "math"),
        ("code", {"scoring": "binary"}, "code"),
        ("think_format", {"label": "think"}, "think"),
    ],
)
def test_get_builds_a_callable_named_after_the_reward(spec, params, expected_name):
    """TRL logs rewards/<__name__>/mean: changing a parameter must not rename the metric."""
    fn = rewards.get(spec, **params)
    assert callable(fn)
    assert fn.__name__ == expected_name
    pickle.loads(pickle.dumps(fn))  # TRL's async rollout worker pickles reward functions


@pytest.mark.parametrize("label", ["", 3, None])
def test_bad_label_is_refused(label):
    with pytest.raises(RewardParameterError, match="label"):
        rewards.validate_params("math", {"label": label})


@pytest.mark.parametrize(("alias", "name"), sorted(ALIASES.items()))
def test_aliases_resolve_to_the_builtin_and_are_listed(alias, name, capsys):
    from gspo_trl.rewards.cli import main

    assert rewards.describe(alias) == rewards.describe(name)
    assert alias in rewards.describe(name).aliases
    assert rewards.get(alias).__name__ == name
    assert main(["list"]) == 0
    listed = capsys.readouterr().out.split("\n\n")
    block = next(b for b in listed if b.startswith(name + "\n"))
    assert f"aliases: {alias}" in block


def test_old_parameter_name_strict_latex_still_works_and_warns(caplog):
    info = rewards.describe("math")
    assert "strict_latex" not in {p.name for p in info.parameters}
    rewards.validate_params("math", {"strict_latex": True})
    with caplog.at_level("WARNING", logger="gspo_trl.rewards.registry"):
        fn = rewards.get("math", strict_latex=True)
    assert fn.latex_shorthand is False and "latex_shorthand" in caplog.text
    with pytest.raises(RewardParameterError, match="latex_shorthand"):
        rewards.get("math", strict_latex=True, latex_shorthand=True)


CLASH_A = """
from gspo_trl.rewards import register

@register("clash_reward")
def first(completions, **kwargs):
    return [1.0 for _ in completions]
"""
CLASH_B = """
from gspo_trl.rewards import register

def helper():
    pass

@register("clash_reward")
def second(completions, **kwargs):
    return [0.0 for _ in completions]

@register("accuracy")
def takes_an_alias(completions, **kwargs):
    return [0.0 for _ in completions]
"""


def test_registering_a_name_twice_names_both_definitions(tmp_path):
    (tmp_path / "clash_a.py").write_text(CLASH_A)
    (tmp_path / "clash_b.py").write_text(CLASH_B)
    rewards.describe(f"{tmp_path}/clash_a.py:first")
    with pytest.raises(ValueError, match="RewardRegistrationError") as err:  # raised while importing the file
        rewards.describe(f"{tmp_path}/clash_b.py:second")
    message = str(err.value)
    assert "'clash_reward'" in message
    assert f"{tmp_path}/clash_a.py:4" in message and f"{tmp_path}/clash_b.py:7" in message
    assert rewards.get("clash_reward")(["x"]) == [1.0]  # the first stays


def test_registering_an_alias_name_is_refused():
    with pytest.raises(rewards.RewardRegistrationError, match=r"'accuracy'.*MathReward"):
        rewards.register("accuracy")(lambda completions, **kwargs: [0.0])


def test_registering_the_same_definition_again_is_allowed():
    from gspo_trl.rewards.shaping import TagCount

    rewards.register("tag_count", factory=True)(TagCount)
    assert rewards.get("tag_count")(["<think>a</think>"]) == [0.5]


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ("maths", ["'maths'", "math"]),
        ("cosin", ["cosine"]),
        ("tag-count", ["tag_count"]),
        ("no_such_module_xyz:fn", ["no_such_module_xyz"]),
        ("json:no_such_function", ["no_such_function"]),
        ("json:dump", []),  # resolves, checked below
        ("missing/file.py:fn", ["does not exist"]),
        ("", ["non-empty"]),
    ],
)
def test_unknown_specs_name_the_spec_and_candidates(spec, fragments):
    if spec == "json:dump":
        assert rewards.describe(spec).name == "dump"
        return
    with pytest.raises(UnknownRewardError) as err:
        rewards.describe(spec)
    assert isinstance(err.value, ValueError)
    for fragment in fragments:
        assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("spec", "params", "fragment"),
    [
        ("cosine", {"max_lenght": 10}, "'max_lenght'"),
        ("cosine", {"max_len": "long"}, "must be int"),
        ("cosine", {"max_len": True}, "must be int"),
        ("cosine", {"max_len": -5}, "max_len must be > 0"),
        ("repetition", {"max_penalty": 1.0}, "max_penalty"),
        ("format", {"think_tag": "a b"}, "not a valid tag"),
        ("math", {"timeout": 0}, "timeout"),
        ("soft_overlong", {"soft_punish_cache": 10_000}, "soft_punish_cache"),
    ],
)
def test_bad_parameters_name_reward_and_parameter(spec, params, fragment):
    with pytest.raises(RewardParameterError) as err:
        rewards.get(spec, **params)
    assert isinstance(err.value, ValueError)
    assert spec in str(err.value) and fragment in str(err.value)


def test_validate_params_is_cheap_and_does_not_build():
    rewards.validate_params("cosine", {"max_len": 64, "min_value_wrong": -2})  # int accepted for float
    with pytest.raises(RewardParameterError, match=r"'math'.*'nope'"):
        rewards.validate_params("math", {"nope": 1})


USER_FILE = """
import asyncio
from gspo_trl.rewards import register

def length_reward(completions, solution, *, scale: float = 1.0, **kwargs):
    '''Length of each completion times scale.'''
    return [scale * len(c) for c in completions]

async def async_reward(completions, **kwargs):
    await asyncio.sleep(0)
    return [1.0 for _ in completions]
"""
DECORATED_FILE = """
from gspo_trl.rewards import register

@register("user_registered_reward", columns=("answer",))
def decorated(completions, answer, **kwargs):
    '''Exact match with the answer column.'''
    return [float(c == a) for c, a in zip(completions, answer)]
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_rewards.py"
    path.write_text(USER_FILE)
    return path


def test_file_path_spec_with_params_and_columns(user_file):
    spec = f"{user_file}:length_reward"
    info = rewards.describe(spec)
    assert info.columns == ("solution",)
    assert [(p.name, p.default) for p in info.parameters] == [("scale", 1.0)]
    assert rewards.get(spec)(["ab", "abc"], solution=["x", "y"]) == [2.0, 3.0]
    scaled = rewards.get(spec, scale=2.0)
    assert scaled.__name__ == "length_reward"
    assert scaled(["ab"], solution=["x"]) == [4.0]
    with pytest.raises(RewardParameterError, match=r"length_reward.*'scal'"):
        rewards.get(spec, scal=2.0)


def test_decorator_registers_by_name(tmp_path):
    user_file = tmp_path / "decorated.py"
    user_file.write_text(DECORATED_FILE)
    rewards.describe(f"{user_file}:decorated")  # importing the file runs the decorator
    info = rewards.describe("user_registered_reward")
    assert info.columns == ("answer",) and info.summary == "Exact match with the answer column."
    fn = rewards.get("user_registered_reward")
    assert fn(["a", "b"], answer=["a", "c"]) == [1.0, 0.0]


def test_async_rewards_stay_async(user_file):
    from trl.trainer.utils import is_async_callable

    plain = rewards.get(f"{user_file}:async_reward")
    assert rewards.describe(f"{user_file}:async_reward").is_async
    assert is_async_callable(plain)
    assert asyncio.run(plain(["x", "y"])) == [1.0, 1.0]


def test_dotted_path_spec(tmp_path, monkeypatch):
    (tmp_path / "dotted_user_pkg").mkdir()
    (tmp_path / "dotted_user_pkg" / "__init__.py").write_text("")
    (tmp_path / "dotted_user_pkg" / "mod.py").write_text(USER_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = rewards.get("dotted_user_pkg.mod:length_reward", scale=0.5)
    assert fn(["abcd"], solution=["-"]) == [2.0]
    with pytest.raises(UnknownRewardError, match=r"length_rewrd.*did you mean length_reward"):
        rewards.describe("dotted_user_pkg.mod:length_rewrd")


def test_entry_point_group(tmp_path, monkeypatch):
    """A real installed distribution's entry point, found by importlib.metadata on sys.path."""
    (tmp_path / "ep_user_rewards.py").write_text(USER_FILE)
    dist = tmp_path / "ep_user_rewards-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-user-rewards\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gspo_trl.rewards]\nep_length = ep_user_rewards:length_reward\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "ep_length" in {info.name for info in rewards.available()}
    assert rewards.describe("ep_length").columns == ("solution",)
    assert rewards.get("ep_length")(["abc"], solution=["x"]) == [3.0]
    with pytest.raises(UnknownRewardError, match=r"ep_lenght.*ep_length"):
        rewards.describe("ep_lenght")


def test_cli_lists_every_reward_with_params_and_columns(capsys):
    from gspo_trl.rewards.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in BUILTINS:
        assert f"\n{name}" in "\n" + out
    assert "max_len=1000" in out and "columns: solution" in out and "columns: tests" in out


def test_cli_describe_unknown_reward_fails_cleanly(capsys):
    from gspo_trl.rewards.cli import main

    assert main(["describe", "cosin"]) == 2
    assert "cosine" in capsys.readouterr().err


def test_console_entry_runs_as_module():
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "gspo_trl.rewards.cli", "list"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "soft_overlong" in out.stdout
