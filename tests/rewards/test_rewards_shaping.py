"""Unit tables for the shaping rewards (format, tag_count, repetition, soft_overlong, cosine)."""

from __future__ import annotations

import math

import pytest

from gspo_trl import rewards
from gspo_trl.rewards.completions import completion_text


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
    ("The cat THE CAT the cat", -0.5),  # word fallback is case-insensitive (open-r1's reading)
]


@pytest.mark.parametrize(("completion", "expected"), both_shapes(REPETITION_TABLE))
def test_repetition(completion, expected):
    assert rewards.get("repetition")([completion]) == [pytest.approx(expected)]


@pytest.mark.parametrize(
    "ids",
    [[[1, 2, 3, 4], [5, 5, 5, 5, 5], [7], []], [(1, 2, 1, 2, 1, 2), (9, 9, 9)]],
)
def test_repetition_on_completion_ids_matches_trl(ids):
    """In training TRL passes completion_ids: they are what is counted, not the text's words."""
    from trl.rewards import get_repetition_penalty_reward

    trl = get_repetition_penalty_reward(ngram_size=2)(completion_ids=ids)
    fn = rewards.get("repetition", ngram_size=2)
    assert fn(["a a a a a a"] * len(ids), completion_ids=ids) == pytest.approx(trl)
    assert fn(completion_ids=ids) == pytest.approx(trl)  # called the way TRL calls its own


def test_repetition_accepts_tensors_of_ids():
    import torch

    fn = rewards.get("repetition", ngram_size=2)
    assert fn(completion_ids=[torch.tensor([3, 3, 3, 3])]) == [pytest.approx(-2 / 3)]


@pytest.mark.parametrize("spec", ["repetition", "soft_overlong", "cosine"])
def test_word_fallback_warns_once_per_reward(spec, caplog):
    from gspo_trl.rewards import completions as completions_module

    completions_module._WARNED_WORDS.discard(spec)
    fn = rewards.get(spec)
    kwargs = {"solution": ["1"]} if spec == "cosine" else {}
    with caplog.at_level("WARNING", logger="gspo_trl.rewards.completions"):
        fn(["a b c a b c"], **kwargs)
        fn(["a b c a b c"], **kwargs)
        fn(["a b c"], completion_ids=[[1, 2, 3]], **kwargs)
    warnings = [r.getMessage() for r in caplog.records if "completion_ids" in r.getMessage()]
    assert len(warnings) == 1 and spec in warnings[0]


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (60, 0.0), (80, 0.0), (90, -0.5), (100, -1.0), (150, -1.0)],
)
def test_soft_overlong(length, expected):
    fn = rewards.get("soft_overlong", max_completion_len=100, soft_punish_cache=20)
    assert fn(["x"], completion_ids=[[0] * length]) == [pytest.approx(expected)]
    assert fn(completion_ids=[[0] * length]) == [pytest.approx(expected)]
    assert fn([chat("w " * length)]) == [pytest.approx(expected)]  # word-count fallback (warns)


@pytest.mark.parametrize("cache", [0, 20, 100])
def test_soft_overlong_matches_trl(cache):
    """cache 0 is TRL's hard cut-off (0 up to the limit, -1 beyond)."""
    from trl.rewards import get_soft_overlong_punishment

    ids = [[0] * n for n in (0, 10, 75, 81, 95, 99, 100, 101, 130)]
    fn = rewards.get("soft_overlong", max_completion_len=100, soft_punish_cache=cache)
    trl = get_soft_overlong_punishment(100, cache)
    ours = fn([""] * len(ids), completion_ids=ids)
    assert ours == pytest.approx(trl(completion_ids=ids))
    if cache == 0:
        assert ours == [0.0] * 7 + [-1.0, -1.0]


THINK_FORMAT_TABLE = [
    ("<think>\nThis is my reasoning.\n</think>\nThis is my answer.", 1.0),  # TRL's docstring example
    ("<think>\nThis is my reasoning.\nThis is my answer.", 0.0),
    ("<think>r</think>", 1.0),
    ("<think></think>answer", 1.0),
    ("<think>a</think><think>b</think>", 0.0),
    ("<think>a <think> b</think>", 0.0),
    (" <think>a</think>", 0.0),  # must open the completion
    ("answer first <think>a</think>", 0.0),
    ("<think>δ 🤔</think> √2", 1.0),
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), both_shapes(THINK_FORMAT_TABLE))
def test_think_format(completion, expected):
    assert rewards.get("think_format")([completion]) == [expected]


def test_think_format_matches_trl():
    from trl.rewards import think_format_reward

    texts = [row[0] for row in THINK_FORMAT_TABLE]
    assert rewards.get("think_format")(texts) == think_format_reward([[{"content": t}] for t in texts])


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
