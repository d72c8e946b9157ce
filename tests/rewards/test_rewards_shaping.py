"""Unit tables for the shaping rewards (format, tag_count, repetition, soft_overlong, cosine)."""

from __future__ import annotations

import math

import pytest

import rewards
from rewards.completions import completion_text


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def both_shapes(table):
    """Each row once as a plain string and once as a chat completion: rewards must agree."""
    return [(text, expected) for text, expected in table] + [
        (chat(text), expected) for text, expected in table
    ]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("plain", "plain"),
        (chat("hi"), "hi"),
        ([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "b"}], "a\nb"),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
                }
            ],
            "xy",
        ),
        ([{"role": "assistant", "content": None}], ""),
        (None, ""),
        ({"role": "assistant", "content": "d"}, "d"),
    ],
)
def test_completion_text(completion, expected):
    assert completion_text(completion) == expected


FORMAT_TABLE = [
    ("<think>why</think><answer>42</answer>", 1.0),
    ("<think>\nmulti\nline\n</think>\n<answer>\n42\n</answer>\n", 1.0),
    ("<think>δοκιμή 🤔</think> <answer>√2</answer>", 1.0),
    ("", 0.0),
    ("<answer>42</answer>", 0.0),
    ("<think>a</think>", 0.0),
    ("<think>a</think><answer>1</answer><answer>2</answer>", 0.0),
    ("<think>a<think>b</think><answer>1</answer>", 0.0),
    ("preamble <think>a</think><answer>1</answer>", 0.0),
    ("<answer>1</answer><think>a</think>", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), both_shapes(FORMAT_TABLE))
def test_format(completion, expected):
    assert rewards.get("format")([completion]) == [expected]


def test_format_custom_tags():
    fn = rewards.get("format", think_tag="reasoning", answer_tag="final")
    assert fn(["<reasoning>r</reasoning><final>f</final>", "<think>r</think><answer>f</answer>"]) == [
        1.0,
        0.0,
    ]


TAG_COUNT_TABLE = [
    ("<think>a</think><answer>b</answer>", 1.0),
    ("<think>a</think>", 0.5),
    ("<think>a</think><think>b</think><answer>c</answer>", 0.5),
    ("<answer>ü</answer> trailing", 0.5),
    ("", 0.0),
    ("no tags at all", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), both_shapes(TAG_COUNT_TABLE))
def test_tag_count(completion, expected):
    assert rewards.get("tag_count")([completion]) == [expected]


REPETITION_TABLE = [
    ("a b c d e f", 0.0),
    ("", 0.0),
    ("too short", 0.0),
    ("a b a b a b", -0.5),  # 4 trigrams, 2 unique -> (1 - 2/4) * -1
    ("x x x x x x x x x x x", -(1 - 1 / 9)),
    ("Ωμέγα Ωμέγα Ωμέγα Ωμέγα", -0.5),
    ("The cat THE CAT the cat", -0.5),  # case-insensitive words
]


@pytest.mark.parametrize(("completion", "expected"), both_shapes(REPETITION_TABLE))
def test_repetition(completion, expected):
    assert rewards.get("repetition")([completion]) == [pytest.approx(expected)]


def test_repetition_on_tokens_matches_trl():
    from trl.rewards import get_repetition_penalty_reward

    ids = [[1, 2, 3, 4], [5, 5, 5, 5, 5], [7]]
    ours = rewards.get("repetition", ngram_size=2, on_tokens=True)(["", "", ""], completion_ids=ids)
    assert ours == get_repetition_penalty_reward(ngram_size=2)(completion_ids=ids)


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (60, 0.0), (80, 0.0), (90, -0.5), (100, -1.0), (150, -1.0)],
)
def test_soft_overlong(length, expected):
    fn = rewards.get("soft_overlong", max_completion_len=100, soft_punish_cache=20)
    assert fn(["x"], completion_ids=[[0] * length]) == [pytest.approx(expected)]
    assert fn([chat("w " * length)]) == [pytest.approx(expected)]  # word-count fallback


def test_soft_overlong_matches_trl():
    from trl.rewards import get_soft_overlong_punishment

    ids = [[0] * n for n in (10, 75, 81, 95, 100, 130)]
    ours = rewards.get("soft_overlong", max_completion_len=100, soft_punish_cache=20)(
        [""] * len(ids), completion_ids=ids
    )
    assert ours == pytest.approx(get_soft_overlong_punishment(100, 20)(completion_ids=ids))


COSINE_TABLE = [
    # completion, gold, length, expected (max_len=100, default bounds)
    (r"\boxed{2}", "2", 0, 1.0),
    (r"\boxed{2}", "2", 50, 0.75),
    (r"\boxed{2}", "2", 100, 0.5),
    (r"\boxed{2}", "2", 400, 0.5),
    (r"\boxed{3}", "2", 0, -1.0),
    (r"\boxed{3}", "2", 50, -0.75),
    (r"\boxed{3}", "2", 100, -0.5),
    ("", "2", 10, -1.0 + 0.25 * (1 - math.cos(0.1 * math.pi))),
    (r"\boxed{\frac{1}{2}} ünïcödé", "0.5", 50, 0.75),
    (r"\boxed{1}", r"\text{}", 50, None),
]


def test_cosine_table_and_trl_agreement():
    from trl.rewards import get_cosine_scaled_reward

    texts = [row[0] for row in COSINE_TABLE]
    golds = [row[1] for row in COSINE_TABLE]
    ids = [[0] * row[2] for row in COSINE_TABLE]
    fn = rewards.get("cosine", max_len=100)
    for completions in (texts, [chat(t) for t in texts]):
        got = fn(completions, solution=golds, completion_ids=ids)
        assert got == [pytest.approx(row[3]) if row[3] is not None else None for row in COSINE_TABLE]
    trl = get_cosine_scaled_reward(max_len=100)([chat(t) for t in texts[:7]], golds[:7], ids[:7])
    assert fn(texts[:7], solution=golds[:7], completion_ids=ids[:7]) == pytest.approx(trl)
