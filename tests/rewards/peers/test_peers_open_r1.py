"""open-r1's reward tests, run against our rewards (huggingface/open-r1, tests/test_rewards.py).

Each case's id names the upstream test. Documented differences (docs/rewards.md):
``cosine`` counts tokens (``completion_ids``), open-r1 counts characters, so its padded
strings become ids of the same length; ``reasoning_steps_reward`` and
``create_weighted_reward`` have no counterpart here (weights live in the recipe); our
positive-``max_penalty`` error message differs.
"""

from __future__ import annotations

import pytest

from gspo_trl import rewards

UPSTREAM = "huggingface/open-r1 tests/test_rewards.py"


def chat(text: str) -> list[dict[str, str]]:
    return [{"content": text}]


@pytest.fixture(scope="module")
def math_reward():
    fn = rewards.get("accuracy", timeout=20.0, workers=2)
    yield fn
    fn.pool.close()


ACCURACY = [
    ("test_accuracy_reward_correct_answer", r"\boxed{\frac{63}{400}}", 1.0),
    ("test_accuracy_reward_wrong_answer", r"\boxed{\frac{64}{400}}", 0.0),
    ("test_multiple_completions", r"\boxed{\frac{63}{400}}", 1.0),
    ("test_multiple_completions", r"\boxed{\frac{64}{400}}", 0.0),
]


@pytest.mark.parametrize(
    ("text", "expected"), [pytest.param(*row[1:], id=f"TestRewards.{row[0]}") for row in ACCURACY]
)
def test_accuracy(text, expected, math_reward):
    assert math_reward([chat(text)], solution=[r"\frac{63}{400}"]) == [expected]


MULTILINE = (
    "<think>\nI will count each distinct object in the image:\n1. Purple scooter\n2. Red bicycle\n"
    "3. Green motorcycle\n4. Gray sedan\n5. Yellow school bus\n6. Small green double-decker bus\n"
    "7. Small red car\n8. Small purple car\n9. Small gray dirt bike\n\n"
    "There are 9 distinct objects in total.\n"
    "</think>\n<answer>9</answer>"
)
FORMAT = [
    ("test_format_reward_correct", "<think>Some reasoning</think><answer>The answer</answer>", 1.0),
    ("test_format_reward_incorrect", "<think>Only thinking</think>", 0.0),
    ("test_format_reward_incorrect", "<answer>Only answer</answer>", 0.0),
    ("test_format_reward_incorrect", "No tags at all", 0.0),
    ("test_format_reward_incorrect", "<think>Missing closing</think><answer>Missing closing", 0.0),
    ("test_format_reward_incorrect", "<think>Wrong order</answer><answer>Wrong order</think>", 0.0),
    ("test_format_reward_specific_multiline", MULTILINE, 1.0),
]


@pytest.mark.parametrize(
    ("text", "expected"), [pytest.param(*row[1:], id=f"TestRewards.{row[0]}") for row in FORMAT]
)
def test_format(text, expected):
    assert rewards.get("format")([chat(text)]) == [expected]


COSINE = [
    (r"\boxed{\frac{63}{400}}", 20, 0.943),
    (r"\boxed{\frac{63}{400}}", 80, 0.547),
    (r"\boxed{\frac{64}{400}}", 20, -0.942),
    (r"\boxed{\frac{64}{400}}", 80, -0.547),
]


@pytest.mark.parametrize(
    ("text", "length", "expected"),
    [pytest.param(*row, id=f"TestRewards.test_cosine_scaled_reward[{i}]") for i, row in enumerate(COSINE)],
)
def test_cosine(text, length, expected):
    fn = rewards.get("cosine", max_len=100, min_value_wrong=-1.0, max_value_wrong=-0.5)
    padded = text + " " * (length - len(text))  # open-r1's length is this string's characters
    got = fn([chat(padded)], solution=[r"\frac{63}{400}"], completion_ids=[[0] * len(padded)])
    assert got == [pytest.approx(expected, abs=5e-3)]


REPETITION = [
    ("test_no_repetition", 2, -1.0, "this is a test sentence", 0.0),
    ("test_full_repetition", 2, -1.0, "this this this this this", -0.75),
    ("test_partial_repetition", 2, -1.0, "this is a this is a test", -1 / 3),
    ("test_multiple_completions", 3, -0.5, "this is a test", 0.0),
    ("test_multiple_completions", 3, -0.5, "test test test test", -0.25),
    ("test_empty_completion", 2, -1.0, "", 0.0),
    ("test_different_ngram_size", 3, -2.0, "this is a this is a test", -0.4),
    ("test_mixed_case", 2, -1.0, "This is A Test", 0.0),
    ("test_mixed_case", 2, -1.0, "this IS a test", 0.0),
    ("test_one_word_completion", 3, -1.0, "word", 0.0),
    ("test_two_word_completion", 3, -1.0, "two words", 0.0),
    ("test_three_word_completion", 3, -1.0, "three different words", 0.0),
    ("test_three_word_repetition_completion", 3, -1.0, "word word word word", -0.5),
    ("test_four_word_completion_with_repetition", 3, -1.0, "one two one two", 0.0),
    ("test_five_word_completion_with_repetition", 3, -0.5, "A B C A B", 0.0),
    ("test_six_word_completion_with_repetition", 3, -1.0, "A B C A B C", -0.25),
    ("test_long_completion_with_repetition", 3, -1.0, "A B C A B C E F G A B C A B C", -0.3846),
    ("test_long_completion_without_repetition", 3, -1.0, "A B C D E F G H I J K L", 0.0),
]


@pytest.mark.parametrize(
    ("ngram_size", "max_penalty", "text", "expected"),
    [pytest.param(*row[1:], id=f"TestRepetitionPenaltyReward.{row[0]}") for row in REPETITION],
)
def test_repetition_on_words(ngram_size, max_penalty, text, expected):
    """open-r1 counts lower-cased words: our reading when no completion_ids are given."""
    fn = rewards.get("repetition_penalty", ngram_size=ngram_size, max_penalty=max_penalty)
    assert fn([chat(text)]) == [pytest.approx(expected, abs=1e-4)]


@pytest.mark.parametrize("max_penalty", [1.0, 1.5])
def test_positive_max_penalty_raises_value_error(max_penalty):
    """TestRepetitionPenaltyReward.test_positive_max_penalty_raises_value_error (message differs)."""
    with pytest.raises(ValueError, match="max_penalty"):
        rewards.get("repetition", ngram_size=2, max_penalty=max_penalty)
