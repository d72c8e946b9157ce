"""TRL's own reward tests, run against our rewards (huggingface/trl, tests/test_rewards.py).

Each case's id names the upstream test it comes from. Our rewards take plain strings as
well as chat messages; the cases use TRL's chat shape. Documented differences: none.
"""

from __future__ import annotations

import pickle

import pytest

from gspo_trl import rewards

UPSTREAM = "huggingface/trl tests/test_rewards.py"
THINK_VALID = [
    "<think>This is my reasoning.</think>This is my answer.",
    "<think>\nThis is my reasoning.\n</think>\nThis is my answer.",
    "<think>\nThis is\nmy reasoning.\n</think>\nThis is my answer.",
    "<think>\nThis is <some tag> my reasoning.</think>\nThis is my answer.",
    "<think></think>\nThis is my answer.",
]
THINK_INVALID = [
    "<think>\nThis is my reasoning.\nThis is my answer.",
    "<think>This is my reasoning.\nThis is my answer.",
    "This is my reasoning. This is my answer.",
    "This is my reasoning.\nThis is my answer.",
    "This is my reasoning.</think>\nThis is my answer.",
    "This is my reasoning.</think>This is my answer.",
    "This<think>is my reasoning.</think>\nThis is my answer.",
    "<think>This is<think>my reasoning.</think></think>This is my answer.",
    "<think>This is</think>\nmy\n<think>reasoning.</think>\nThis is my answer.",
]
THINK_CASES = [
    *[
        pytest.param(t, 1.0, id=f"TestThinkFormatReward.test_valid_format[{i}]")
        for i, t in enumerate(THINK_VALID)
    ],
    *[
        pytest.param(t, 0.0, id=f"TestThinkFormatReward.test_invalid_format[{i}]")
        for i, t in enumerate(THINK_INVALID)
    ],
    *[
        pytest.param(t, e, id=f"TestThinkFormatReward.test_mixed_format[{i}]")
        for i, (t, e) in enumerate(
            zip(THINK_VALID[:2] + THINK_INVALID[1:3], [1.0, 1.0, 0.0, 0.0], strict=True)
        )
    ],
]


def chat(text: str) -> list[dict[str, str]]:
    return [{"content": text}]


@pytest.mark.parametrize(("text", "expected"), THINK_CASES)
def test_think_format(text, expected):
    assert rewards.get("think_format")([chat(text)]) == [expected]


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        pytest.param(
            50, 0.0, id="TestSoftOverlongPunishmentReward.test_soft_overlong_punishment_short_completion"
        ),
        pytest.param(
            110, -1.0, id="TestSoftOverlongPunishmentReward.test_soft_overlong_punishment_long_completion"
        ),
        pytest.param(
            90,
            -0.5,
            id="TestSoftOverlongPunishmentReward.test_soft_overlong_punishment_intermediate_completion",
        ),
    ],
)
def test_soft_overlong(length, expected):
    fn = rewards.get("soft_overlong_punishment", max_completion_len=100, soft_punish_cache=20)
    assert fn(completion_ids=[[1] * length]) == [pytest.approx(expected, abs=1e-4)]


@pytest.fixture(scope="module")
def math_reward():
    fn = rewards.get("accuracy", timeout=20.0, workers=2)
    yield fn
    fn.pool.close()


ACCURACY = [
    ("test_accuracy_reward_correct_answer", r"\boxed{\frac{63}{400}}", r"\frac{63}{400}", 1.0),
    ("test_accuracy_reward_correct_answer", r"\boxed{\frac{63}{400}}", "63/400", 1.0),
    ("test_accuracy_reward_wrong_answer", r"\boxed{\frac{64}{400}}", r"\frac{63}{400}", 0.0),
    ("test_accuracy_reward_wrong_answer_no_latex", r"\boxed{3}", "6", 0.0),
    ("test_accuracy_reward_unparsable_gold", "Answer is forty two.", "Answer is forty two.", None),
    (
        "test_accuracy_reward_unparsable_gold",
        r"Some other content. \boxed{43}.",
        "Answer is forty three.",
        None,
    ),
    ("test_accuracy_reward_in_worker_thread", r"\boxed{\frac{1}{3}}", r"\frac{1}{3}", 1.0),
]


@pytest.mark.parametrize(
    ("text", "gold", "expected"),
    [pytest.param(*row[1:], id=f"TestAccuracyReward.{row[0]}") for row in ACCURACY],
)
def test_accuracy(text, gold, expected, math_reward):
    assert math_reward([chat(text)], solution=[gold]) == [expected]


REASONING = [
    ("test_correct_answer_yields_unit_reward", r"<think> Reasoning content </think> \boxed{\frac{63}{400}}",
     r"\frac{63}{400}", ["</think>"], 1.0),
    ("test_correct_answer_yields_unit_reward", r"Reasoning content </think> \boxed{\frac{63}{400}}",
     r"\frac{63}{400}", ["</think>"], 1.0),
    ("test_correct_answer_with_custom_tags_yields_unit_reward",
     r"<REASONING_START> Reasoning content </REASONING_END> \boxed{\frac{63}{400}}", r"\frac{63}{400}",
     ["</REASONING_END>"], 1.0),
    ("test_incorrect_answer_yields_zero_reward", r"<think> Reasoning content </think> \boxed{\frac{64}{400}}",
     r"\frac{63}{400}", ["</think>"], 0.0),
    ("test_correct_answer_in_reasoning_yields_zero_reward",
     r"<think> My answer is \boxed{42} </think> Some other text.", r"\boxed{42}", ["</think>"], 0.0),
    ("test_correct_answer_in_reasoning_yields_zero_reward",
     r"<think> The answer is \boxed{42} </think> Here's a wrong answer: \boxed{43}.", r"\boxed{42}",
     ["</think>"], 0.0),
    ("test_incomplete_reasoning_yields_zero_reward", r"<think> Incomplete reasoning without closing tag",
     r"\frac{63}{400}", ["</think>"], 0.0),
    ("test_incomplete_reasoning_yields_zero_reward",
     r"Correct answer \frac{63}{400} but completely missing reasoning content", r"\frac{63}{400}",
     ["</think>"], 0.0),
    ("test_unparsable_gold_solution_yields_none_reward", r"<think> Reasoning content </think> \boxed{42}",
     "forty two", ["</think>"], None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "gold", "delimiters", "expected"),
    [pytest.param(*row[1:], id=f"TestReasoningAccuracyReward.{row[0]}") for row in REASONING],
)
def test_reasoning_accuracy(text, gold, delimiters, expected):
    fn = rewards.get("math", timeout=20.0, workers=2, reasoning_delimiters=delimiters)
    assert fn([chat(text)], solution=[gold]) == [expected]


THIRD, HALF = r"\boxed{\frac{1}{3}}", r"\boxed{\frac{1}{2}}"
COSINE = [
    ("test_correct_shorter_rewarded_more", {}, [THIRD, THIRD], [25, 75], [0.92678, 0.57322]),
    ("test_wrong_longer_penalized_less", {}, [HALF, HALF], [25, 75], [-0.92678, -0.57322]),
    ("test_midpoint_values", {}, [THIRD, HALF], [50, 50], [0.75, -0.75]),
    ("test_correct_boundary_values", {}, [THIRD, THIRD], [0, 100], [1.0, 0.5]),
    ("test_wrong_boundary_values", {}, [HALF, HALF], [0, 100], [-1.0, -0.5]),
    ("test_length_exceeding_max_len_is_clamped", {}, [THIRD, HALF], [200, 200], [0.5, -0.5]),
    ("test_custom_value_bounds", {"min_value_correct": 0.0, "max_value_correct": 2.0}, [THIRD], [50], [1.0]),
]


@pytest.mark.parametrize(
    ("params", "texts", "lengths", "expected"),
    [pytest.param(*row[1:], id=f"TestCosineScaledReward.{row[0]}") for row in COSINE],
)
def test_cosine(params, texts, lengths, expected):
    fn = rewards.get("cosine", max_len=100, **params)
    ids = [[1] * n for n in lengths]
    got = fn([chat(t) for t in texts], solution=[r"\frac{1}{3}"] * len(texts), completion_ids=ids)
    assert got == [pytest.approx(e, abs=1e-4) for e in expected]


def test_cosine_unparsable_gold_yields_none():
    """TestCosineScaledReward.test_unparsable_gold_yields_none"""
    fn = rewards.get("cosine", max_len=100)
    assert fn([chat(r"\boxed{42}")], solution=["forty two"], completion_ids=[[1] * 50]) == [None]


def test_cosine_reward_is_picklable():
    """TestCosineScaledReward.test_reward_is_picklable (our metric name is the reward's: `cosine`)."""
    fn = pickle.loads(pickle.dumps(rewards.get("cosine", max_len=100)))
    assert fn([chat(THIRD)], solution=[r"\frac{1}{3}"], completion_ids=[[1] * 50]) == [pytest.approx(0.75)]
    assert fn.__name__ == "cosine"
