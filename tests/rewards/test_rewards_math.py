"""The ``math`` reward: verdict table, bare gold answers, threads, time limits, pathological LaTeX."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from gspo_trl import rewards
from gspo_trl.rewards.math_answers import last_boxed

LIMIT_S = 1.0
GRACE_S = 0.5  # the pool's kill margin past the limit


@pytest.fixture(scope="module")
def math_reward():
    """Generous limit: verdict tables must not depend on how loaded the machine is."""
    fn = rewards.get("math", timeout=20.0, workers=2)
    yield fn
    fn.pool.close()


@pytest.fixture(scope="module")
def tight_math_reward():
    """A 1 s limit for the pathological battery."""
    fn = rewards.get("math", timeout=LIMIT_S, workers=2)
    yield fn
    fn.pool.close()


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


# completion, gold, expected score
VERDICTS = [
    (r"The answer is \boxed{\frac{1}{3}}.", r"\frac{1}{3}", 1.0),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{3}", 0.0),
    (r"\boxed{0.5}", r"\frac12", 1.0),
    (r"so $x = \boxed{(x+1)^2}$", "x^2+2x+1", 1.0),
    (r"\boxed{x^2+2x}", "x^2+2x+1", 0.0),
    (r"\boxed{(1, 3]}", "(1,3]", 1.0),
    (r"\boxed{[1,3]}", "(1,3]", 0.0),
    (r"\boxed{2\sqrt{3}}", r"2\sqrt{3}", 1.0),
    (r"\boxed{2}", r"2\sqrt{3}", 0.0),  # TRL's default gold parse reads this gold as 2
    (r"\boxed{\sqrt{12}}", r"2\sqrt 3", 1.0),
    (r"\boxed{\frac13}", r"\frac{1}{3}", 1.0),  # valid TeX shorthand (TRL's settings reject it)
    (r"\boxed{2\sqrt3}", r"2\sqrt{3}", 1.0),
    (r"\boxed{\dfrac{\pi}{2}}", r"\pi/2", 1.0),
    (r"\boxed{(2,-3)}", "(2, -3)", 1.0),
    (r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", 1.0),
    (r"\boxed{10^\circ}", "10", 1.0),
    (r"\boxed{\infty}", r"\infty", 1.0),
    (r"\boxed{\$18.90}", r"\$18.90", 1.0),
    (r"\boxed{5\%}", r"5\%", 1.0),
    (r"\boxed{\{1,2\}}", r"\{1,2\}", 1.0),
    (r"\boxed{\text{(B)}}", "(B)", 1.0),
    (r"\boxed{C}", r"\text{(B)}", 0.0),
    ("", "3", 0.0),
    ("I don't know.", "3", 0.0),
    (r"first \boxed{2}, finally \boxed{3}", "3", 1.0),  # the last box is the answer
    (r"first \boxed{3}, finally \boxed{2}", "3", 0.0),
    (r"\boxed{\boxed{3}}", "3", 1.0),
    (r"réponse: \boxed{√2}... or in LaTeX \boxed{\sqrt{2}} ✓", r"\sqrt{2}", 1.0),
    ("Ответ: $\\frac{3}{4}$", r"\dfrac34", 0.0),  # no box, no anchor: TRL's settings find no answer
    ("Ответ... The final answer is $\\frac{3}{4}$", r"\dfrac34", 1.0),  # no box: TRL's LaTeX anchors
    (r"\boxed{3", "3", 0.0),  # unbalanced box
    (r"\boxed{3}", "$3$", 1.0),  # gold with delimiters parses as in TRL
    (r"\boxed{1}", r"\text{}", None),  # unparseable gold
    (r"\boxed{1}", "", None),
]


def test_verdict_table_plain_and_chat(math_reward):
    texts = [row[0] for row in VERDICTS]
    golds = [row[1] for row in VERDICTS]
    expected = [row[2] for row in VERDICTS]
    assert math_reward(texts, solution=golds) == expected
    assert math_reward([chat(t) for t in texts], solution=golds) == expected


def test_without_latex_shorthand_answers_read_as_trl_does():
    from trl.rewards import accuracy_reward

    texts = [r"\boxed{\frac13}", r"\boxed{2\sqrt3}", r"\boxed{\frac{1}{3}}", r"\boxed{\frac{1}{2}}", "none"]
    golds = [r"$\frac{1}{3}$", r"$2\sqrt{3}$", r"$\frac{1}{3}$", r"$\frac{1}{3}$", "$3$"]
    strict = rewards.get("math", latex_shorthand=False, timeout=20.0, workers=2)
    try:
        expected = accuracy_reward([[{"content": t}] for t in texts], golds)
        assert expected == [0.0, 0.0, 1.0, 0.0, 0.0]
        assert strict(texts, solution=golds) == expected
        assert rewards.get("math", timeout=20.0, workers=2)(texts, solution=golds) == [
            1.0,
            1.0,
            1.0,
            0.0,
            0.0,
        ]
    finally:
        strict.pool.close()


def test_repeated_answers_reuse_one_verdict_and_stay_correct(math_reward):
    """Within a group many completions end in the same box; cached verdicts must not leak across golds."""
    texts = [r"so \boxed{4}", r"thus \boxed{4}", r"\boxed{4}", r"\boxed{5}"] * 2
    golds = ["4"] * 4 + ["5"] * 4
    assert math_reward(texts, solution=golds) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]


def test_unparseable_gold_logs_one_line_naming_the_row(math_reward, caplog):
    with caplog.at_level(logging.WARNING, logger="gspo_trl.rewards.math_verify_reward"):
        scores = math_reward(
            [r"\boxed{1}"] * 5, solution=["1", "1", r"\frac{1}{", r"\frac{1}{", r"\frac{1}{"]
        )
    assert scores == [1.0, 1.0, None, None, None]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "row 2" in lines[0] and r"\\frac{1}{" in lines[0]


def test_gold_is_parsed_once_per_prompt():
    fn = rewards.get("math", timeout=5.0, workers=2)
    try:
        golds = [g for g in ("7", "x+1", r"\frac{2}{3}", "(1,2)") for _ in range(8)]
        assert fn([r"\boxed{7}"] * len(golds), solution=golds) == [1.0] * 8 + [0.0] * 24
        # not 32: once per distinct gold and worker at most (a second worker helps with a tail)
        assert 4 <= fn.gold_parses <= 4 * 2
        fn([r"\boxed{1}"] * 16, solution=["1"] * 16)  # one prompt split across both workers
        assert fn.gold_parses <= 4 * 2 + 2
    finally:
        fn.pool.close()


def test_log_extra_receives_parsed_answers(math_reward):
    logged: dict[str, list] = {}
    math_reward([r"\boxed{2}"], solution=["2"], log_extra=logged.__setitem__)
    assert logged["gold_parsed"] == ["2"] and logged["answer_parsed"] == ["2"]


def test_safe_from_other_threads(math_reward):
    """math-verify's own SIGALRM limit raises outside the main thread; ours must not."""
    results: list = []
    errors: list = []

    def call():
        try:
            results.append(math_reward([r"\boxed{4}", r"\boxed{5}"], solution=["4", "4"]))
        except Exception as err:  # pragma: no cover - the assertion below reports it
            errors.append(err)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and results == [[1.0, 0.0]] * 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{a}", "a"),
        (r"\boxed{a} \boxed{b}", "b"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\fbox{x}", "x"),
        (r"\boxed {y}", "y"),
        (r"\boxed{open", None),
        (r"\boxed{ok} then \boxed{open", "ok"),
        ("none", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


NESTED = "{" * 50_000 + "1" + "}" * 50_000
PATHOLOGICAL = [
    r"\boxed{10^{10^{10^{10}}}}",
    r"\boxed{9^{9^{9^{9^{9}}}}}",
    r"\boxed{" + NESTED + "}",
    r"\boxed{" + r"\frac{" * 5_000 + "}",
    r"\boxed{" + "+".join(["x"] * 20_000) + "}",
    r"\boxed{" + r"\sqrt{" * 3_000 + "2" + "}" * 3_000 + "}",
    r"\boxed{(10^{100})!}",
    "$" + "x^" * 10_000 + "2$",
    r"\boxed{" + "\\left(" * 2_000 + "\\right)" * 2_000 + "}",
    "\\boxed{" * 20_000,
]


@pytest.mark.slow
def test_pathological_latex_is_bounded_per_item(tight_math_reward):
    """Each item alone: a verdict (0.0) within the limit + kill margin, and the pool survives."""
    slowest = 0.0
    for text in PATHOLOGICAL:
        start = time.monotonic()
        assert tight_math_reward([text], solution=["1"]) in ([0.0], [1.0])
        slowest = max(slowest, time.monotonic() - start)
        # limit + kill margin + start-up of the worker replacing one killed by the previous item
        assert time.monotonic() - start < LIMIT_S + GRACE_S + 3.0, text[:60]
    assert tight_math_reward([r"\boxed{1}"], solution=["1"]) == [1.0]
    assert all(os.path.exists(f"/proc/{pid}") for pid in tight_math_reward.pool.pids())


@pytest.mark.slow
def test_pathological_items_do_not_stall_a_batch(tight_math_reward):
    """A batch of 32 normal items with 4 pathological ones costs about 4 limits / 2 workers."""
    texts = [r"\boxed{3}"] * 28 + PATHOLOGICAL[:2] + [r"\boxed{" + NESTED + "}", PATHOLOGICAL[0]]
    start = time.monotonic()
    scores = tight_math_reward(texts, solution=["3"] * len(texts))
    assert scores[:28] == [1.0] * 28 and scores[28:] == [0.0] * 4
    assert time.monotonic() - start < 4 * (LIMIT_S + GRACE_S) / 2 + 3.0


def test_closing_the_pool_leaves_no_worker():
    fn = rewards.get("math", timeout=2.0, workers=2)
    assert fn([r"\boxed{1}", r"\boxed{2}"], solution=["1", "1"]) == [1.0, 0.0]
    pids = fn.pool.pids()
    assert len(pids) == 2
    fn.pool.close()
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)


INTEGER_PAIRS = [("7", "7"), ("7", "8"), ("-3", "-3"), ("-3", "3"), ("$12$", "12"), ("007", "7"), ("0", "-0")]


@pytest.mark.parametrize(("gold", "answer"), [*INTEGER_PAIRS, ("10", "10.0")])
def test_integer_fast_path_agrees_with_math_verify(gold, answer):
    """Plain integers skip sympy; the verdict must be math-verify's."""
    from math_verify import parse, verify

    from gspo_trl.rewards.math_answers import integer_verdict, parse_answer, parse_gold

    quick = integer_verdict(gold, answer)
    full = verify(parse_gold(gold), parse_answer(f"\\boxed{{{answer}}}"), timeout_seconds=None)
    assert quick is None or quick == full
    assert (quick is None) == (answer == "10.0")
    assert parse("$1$")  # math-verify itself is importable in the test process


@pytest.mark.slow
def test_slow_items_of_one_prompt_spread_over_workers(tight_math_reward):
    """Four 1 s items of one prompt (100 KB each) on two workers: ~2 s, not the 4 s of one
    worker doing them all (a big request queued on a busy worker once blocked the pool)."""
    texts = [r"\boxed{3}"] * 8 + [r"\boxed{" + NESTED + f"{i}}}" for i in range(4)]  # 4 distinct
    tight_math_reward.pool.start()  # worker start-up is not what is measured
    start = time.monotonic()
    scores = tight_math_reward(texts, solution=["3"] * 8 + ["1"] * 4)
    assert scores == [1.0] * 8 + [0.0] * 4
    assert time.monotonic() - start < 3.6 * LIMIT_S


# gold, a correct answer: words are not judged (None), maths is (1.0 right, 0.0 wrong)
GOLDS_WORDS_OR_MATHS = [
    ("forty two", r"\boxed{42}", None),
    ("yes", r"\boxed{yes}", None),
    ("no", r"\boxed{no}", None),
    ("none", r"\boxed{none}", None),
    ("Monday", r"\boxed{\text{Monday}}", None),
    ("red", r"\boxed{red}", None),
    ("12 dollars", r"\boxed{12}", None),
    (r"\text{Monday}", r"\boxed{Monday}", None),
    (r"2\sqrt{3}", r"\boxed{\sqrt{12}}", 1.0),
    ("(1,3]", r"\boxed{(1,3]}", 1.0),
    ("x^2+1", r"\boxed{1+x^2}", 1.0),
    (r"\frac12", r"\boxed{0.5}", 1.0),
    ("1,234", r"\boxed{1234}", 1.0),
    ("a^2+2ab+b^2", r"\boxed{(a+b)^2}", 1.0),  # letter pairs inside an expression stay maths
    ("5 cm", r"\boxed{5}", 1.0),  # math-verify drops the unit
    ("A", r"\boxed{A}", 1.0),
]


def test_gold_in_words_is_not_judged_and_maths_is(math_reward):
    """Issue 13: sympy reads `yes` as E*s*y, so `\\boxed{yes}` used to score 1.0 and 42 0.0."""
    golds = [row[0] for row in GOLDS_WORDS_OR_MATHS]
    right = math_reward([row[1] for row in GOLDS_WORDS_OR_MATHS], solution=golds)
    wrong = math_reward([r"\boxed{7}"] * len(golds), solution=golds)
    assert right == [row[2] for row in GOLDS_WORDS_OR_MATHS]
    assert wrong == [None if row[2] is None else 0.0 for row in GOLDS_WORDS_OR_MATHS]


def test_missing_gold_scores_none_not_the_string_none(math_reward):
    scores = math_reward([r"\boxed{None}", r"\boxed{3}", r"\boxed{3}"], solution=[None, None, "3"])
    assert scores == [None, None, 1.0]


def test_identical_pathological_completions_cost_one_time_limit(tight_math_reward):
    """Issue 12: 8 copies of one power tower used to cost 8 time limits (21 s)."""
    tower = r"\boxed{9^{9^{9^{9}}}}"
    tight_math_reward.pool.start()
    start = time.monotonic()
    assert tight_math_reward([tower], solution=["1"]) == [0.0]
    one = time.monotonic() - start
    start = time.monotonic()
    assert tight_math_reward([f"step {i}: {tower}" for i in range(8)], solution=["1"] * 8) == [0.0] * 8
    eight = time.monotonic() - start
    assert one >= LIMIT_S  # it really is pathological, or this test measures nothing
    assert eight < 2.0 * one, (one, eight)


# completion, answer_format, expected against gold 34
ANSWER_FORMS = [
    ("Reasoning...\nAnswer: $34$", "answer_line", 1.0),
    ("Reasoning...\nAnswer: 34", "answer_line", 1.0),
    ("Reasoning...\nAnswer: 34.", "answer_line", 1.0),
    ("answer: \\boxed{34}", "answer_line", 1.0),
    ("Answer: 12\nno wait\nAnswer: 34", "answer_line", 1.0),  # the last line wins
    ("Answer: 34\nno wait\nAnswer: 12", "answer_line", 0.0),
    ("\\boxed{34}", "answer_line", 0.0),  # a box is not an Answer: line
    ("Reasoning...\nAnswer: $34$", "boxed", 1.0),  # math-verify's answer: anchor, without a box
    ("\\boxed{12}\nAnswer: 34", "boxed", 0.0),  # the box is the answer
    ("\\boxed{12}\nAnswer: 34", "any", 1.0),  # the later of the two
    ("Answer: 34\nso \\boxed{12}", "any", 0.0),
    ("Answer: 34\nso \\boxed{34}", "any", 1.0),
    ("no answer at all", "any", 0.0),
    ("no answer at all", "answer_line", 0.0),
    # Markdown bold (Qwen3's non-thinking style): math-verify's answer: anchor reads these as 34
    # (its parser.py allows anything up to 50 characters between "answer:" and the number).
    ("Reasoning...\n**Answer:** 34", "answer_line", 1.0),
    ("Reasoning...\n**Answer: 34**", "answer_line", 1.0),
    ("Reasoning...\nAnswer: **34**", "answer_line", 1.0),
    ("Reasoning...\n**Answer**: 34", "answer_line", 1.0),
    ("Reasoning...\n*Answer:* *34*.", "answer_line", 1.0),
    ("Reasoning...\nAnswer: $**34**$", "answer_line", 1.0),
    ("Reasoning...\n**Answer: 34.**", "answer_line", 1.0),
    ("Reasoning...\n**Answer:** 12", "answer_line", 0.0),
    ("Reasoning...\n**Answer:** $2 \\cdot 17$", "answer_line", 1.0),
    ("**Answer:** 34", "any", 1.0),
    ("**Answer: 34**", "any", 1.0),
    ("Answer: **34**", "any", 1.0),
    ("\\boxed{34}\n**Answer:** 34", "any", 1.0),  # a bold line after the right box agrees with it
    ("\\boxed{34}\n**Answer:** 12", "any", 0.0),  # the later answer still wins
    ("\\boxed{12}\n**Answer: 34**", "any", 1.0),
]


@pytest.mark.parametrize(("text", "answer_format", "expected"), ANSWER_FORMS)
def test_answer_formats(text, answer_format, expected, math_reward):
    fn = rewards.get("math", timeout=20.0, workers=2, answer_format=answer_format)
    assert fn([text], solution=["34"]) == [expected]


def test_final_statement_after_intermediate_boxes_wins(math_reward):
    text = (
        r"First $a = \boxed{17}$ and $b = \boxed{615}$, so the product is $17 \cdot 615$."
        "\nThe final answer is $10,455$"
    )
    assert math_reward([text, text], solution=["10455", "17"]) == [1.0, 0.0]
    # a box after the statement is the final word again
    assert math_reward([text + r" or rather \boxed{17}"], solution=["17"]) == [1.0]
    # a statement without LaTeX is no answer form (math-verify's rule): the box stays the answer
    assert math_reward([r"\boxed{3}. So the final answer is 3."], solution=["3"]) == [1.0]


REASONING = [
    (r"<think> Reasoning </think> The final answer is \boxed{\frac{1}{3}}", 1.0),
    (r"<think> Reasoning </think> The final answer is \boxed{\frac{1}{2}}", 0.0),
    (r"<think> partial answers \boxed{\frac{1}{3}} but no final answer", 0.0),
    (r"<think> try \boxed{\frac{1}{2}} </think> so \boxed{\frac{1}{3}}", 1.0),
    (r"<think> \boxed{\frac{1}{3}} </think> I give up", 0.0),
]


def test_reasoning_delimiters_grade_only_text_after_the_reasoning(math_reward):
    from trl.rewards import reasoning_accuracy_reward

    texts, expected = [r[0] for r in REASONING], [r[1] for r in REASONING]
    golds = [r"$\frac{1}{3}$"] * len(texts)
    fn = rewards.get("math", timeout=20.0, workers=2, reasoning_delimiters=["</think>"])
    assert fn(texts, solution=golds) == expected
    assert reasoning_accuracy_reward([[{"content": t}] for t in texts], golds) == expected
    assert math_reward(texts, solution=golds) == [1.0, 0.0, 1.0, 1.0, 1.0]  # without: any box counts


@pytest.mark.parametrize(
    ("params", "text", "gold", "expected"),
    [
        ({}, r"\boxed{3.1415926}", r"3.14159265", 1.0),  # 6 decimals by default
        ({"float_rounding": 8}, r"\boxed{3.1415926}", r"3.14159265", 0.0),
        ({}, r"\boxed{y=3}", r"x=3", 0.0),  # strict: variable names matter
        ({"strict": False}, r"\boxed{y=3}", r"x=3", 1.0),
        ({}, r"\boxed{1 < x < 2}", r"(1,2)", 0.0),
        ({"allow_set_relation_comp": True}, r"\boxed{1 < x < 2}", r"(1,2)", 1.0),
        ({"numeric_precision": 30}, r"\boxed{\frac{1}{3}}", r"0.333333", 1.0),
    ],
)
def test_math_verify_checker_options(params, text, gold, expected):
    from math_verify import parse, verify

    from gspo_trl.rewards.math_answers import parse_answer, parse_gold

    fn = rewards.get("math", timeout=20.0, workers=2, **params)
    assert fn([text], solution=[gold]) == [expected]
    assert float(verify(parse_gold(gold), parse_answer(text), timeout_seconds=None, **params)) == expected
    assert parse("$1$")


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"answer_format": "last_line"}, "answer_format"),
        ({"reasoning_delimiters": "</think>"}, "reasoning_delimiters"),
        ({"reasoning_delimiters": [""]}, "reasoning_delimiters"),
        ({"float_rounding": -1}, "float_rounding"),
    ],
)
def test_bad_math_options_are_refused(params, fragment):
    with pytest.raises(rewards.RewardParameterError, match=fragment):
        rewards.get("math", **params)
