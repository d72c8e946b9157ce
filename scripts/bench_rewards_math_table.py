"""A MATH-style answer table for ``bench_rewards.py``: gold answers as MATH stores them
(bare LaTeX, no ``$...$``), answers a grader would accept, and answers it would reject.

Labels are by hand, from what a human grader of MATH would accept, not from any
verifier's output. Completions built from it wrap one answer in a ``\\boxed{}``.
"""

# gold (as stored), equivalent answers, wrong answers
TABLE: list[tuple[str, list[str], list[str]]] = [
    (r"\frac{1}{3}", [r"\frac13", r"\dfrac{1}{3}", "1/3"], [r"\frac{1}{2}", "3"]),
    ("x^2+2x+1", ["(x+1)^2", "1+2x+x^2", "x^2+2x+1"], ["x^2+1", "(x-1)^2"]),
    ("(1,3]", ["(1,3]", "(1, 3]"], ["[1,3]", "(1,3)"]),
    (r"2\sqrt{3}", [r"\sqrt{12}", r"2\sqrt3", r"2 \sqrt{3}"], ["2", r"3\sqrt{2}"]),
    (r"\frac{\pi}{2}", [r"\pi/2", r"\frac{\pi}{2}", r"\dfrac{\pi}{2}"], [r"\pi", r"2\pi"]),
    ("(2,-3)", ["(2, -3)", "(2,-3)"], ["(-3,2)", "(2,3)"]),
    ("10", ["10", "10.0", "10.00"], ["11", "100"]),
    (r"-\infty", [r"-\infty"], [r"\infty", "0"]),
    ("[-2,5)", ["[-2, 5)", "[-2,5)"], ["(-2,5)", "[-2,5]"]),
    (
        r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}",
        [r"\begin{pmatrix}1\\2\end{pmatrix}"],
        [r"\begin{pmatrix}2\\1\end{pmatrix}"],
    ),
    ("0.5", [r"\frac{1}{2}", "0.5", ".5"], ["0.05", "5"]),
    (r"\frac{3}{4}", ["0.75", r"\frac{6}{8}", r"\tfrac34"], [r"\frac{4}{3}", "0.7"]),
    ("-7", ["-7", "-7.0"], ["7", "-6"]),
    ("1000", ["1000", "1{,}000", "10^3"], ["100", "10000"]),
    (r"\sqrt{2}", [r"\sqrt{2}", r"2^{1/2}", r"\sqrt 2"], ["2", r"\sqrt{3}"]),
    (r"4\pi", [r"4\pi", r"4 \pi"], [r"2\pi", "4"]),
    ("3x-2", ["3x-2", "-2+3x"], ["3x+2", "2-3x"]),
    ("x=5", ["x=5", "5"], ["x=-5", "6"]),
    ("y=2x+3", ["y=2x+3", "y = 3 + 2x"], ["y=3x+2", "y=2x-3"]),
    (r"\{1,2\}", [r"\{1,2\}", r"\{2, 1\}"], [r"\{1,3\}", r"\{1\}"]),
    ("1,2,3", ["1,2,3", "1, 2, 3"], ["1,2", "1,2,4"]),
    ("45", ["45", r"45^\circ", "45^{\\circ}"], ["135", "90"]),
    ("2^{10}", ["1024", "2^{10}"], ["2^{9}", "512"]),
    (r"\frac{5}{12}", [r"\frac{5}{12}", r"\frac{10}{24}"], [r"\frac{7}{12}", r"\frac{12}{5}"]),
    ("a+b", ["a+b", "b+a"], ["a-b", "ab"]),
    ("2", ["2", "2.0", r"\frac{4}{2}"], ["3", "-2"]),
    ("0", ["0", "0.0"], ["1", "-1"]),
    ("1", ["1", "1.0", r"\frac{3}{3}"], ["0", "2"]),
    (
        r"-\frac{\sqrt{3}}{2}",
        [r"-\frac{\sqrt{3}}{2}", r"-\frac{\sqrt3}{2}", r"\frac{-\sqrt{3}}{2}"],
        [r"\frac{\sqrt{3}}{2}"],
    ),
    (r"\frac{\sqrt{2}}{2}", [r"\frac{1}{\sqrt{2}}", r"\frac{\sqrt2}{2}"], [r"\sqrt{2}", r"\frac{1}{2}"]),
    ("12", ["12", "12.0"], ["13", "21"]),
    ("3.14", ["3.14"], ["3.15", "3.41"]),
    ("(-\\infty, 0)", [r"(-\infty,0)", r"(-\infty, 0)"], [r"(-\infty,0]", r"(0,\infty)"]),
    (
        r"(-\infty,-2]\cup[2,\infty)",
        [r"(-\infty,-2]\cup[2,\infty)"],
        [r"[-2,2]", r"(-\infty,-2)\cup(2,\infty)"],
    ),
    ("x^3-3x+2", ["x^3-3x+2", "2-3x+x^3", "(x-1)^2(x+2)"], ["x^3+3x+2", "x^3-3x-2"]),
    (r"\frac{1}{x}", [r"\frac{1}{x}", "x^{-1}", "1/x"], ["x", r"\frac{1}{x^2}"]),
    ("6", ["6", "6.0", r"\frac{12}{2}"], ["5", "7"]),
    (r"\frac{9}{2}", ["4.5", r"\frac{9}{2}", r"4\frac{1}{2}"], [r"\frac{2}{9}", "4"]),
    ("-1", ["-1", "-1.0"], ["1", "0"]),
    ("27", ["27", "3^3"], ["9", "81"]),
    (r"2\pi", [r"2\pi", r"2 \pi"], [r"\pi", r"4\pi"]),
    ("(3,4)", ["(3,4)", "(3, 4)"], ["(4,3)", "(3,5)"]),
    ("8", ["8", "2^3"], ["6", "16"]),
    (r"\frac{7}{3}", [r"\frac{7}{3}", r"2\frac{1}{3}", r"\frac{14}{6}"], [r"\frac{3}{7}", "2"]),
    (r"5\sqrt{5}", [r"5\sqrt{5}", r"\sqrt{125}"], [r"5\sqrt{3}", "25"]),
    ("100", ["100", "10^2"], ["1000", "99"]),
    (r"\frac{1}{4}", ["0.25", r"\frac{1}{4}", r"\frac{2}{8}"], ["4", r"\frac{1}{2}"]),
    ("15", ["15"], ["16", "5"]),
    (r"3\sqrt{2}", [r"3\sqrt{2}", r"\sqrt{18}"], [r"2\sqrt{3}", "3"]),
    ("-2", ["-2"], ["2", "-3"]),
    ("(0,1)", ["(0,1)", "(0, 1)"], ["[0,1]", "(1,0)"]),
    (r"\frac{2}{3}", [r"\frac{2}{3}", r"\frac{4}{6}"], [r"\frac{3}{2}", "0.6"]),
    ("2x+1", ["2x+1", "1+2x"], ["2x-1", "x+1"]),
    ("36", ["36", "6^2"], ["35", "63"]),
    (r"\frac{11}{2}", ["5.5", r"\frac{11}{2}"], ["11", "5"]),
    ("5", ["5", "5.0"], ["4", "-5"]),
    (r"\frac{\pi}{3}", [r"\frac{\pi}{3}", r"\pi/3"], [r"\frac{\pi}{6}", r"\frac{2\pi}{3}"]),
    ("9", ["9", "3^2"], ["8", "-9"]),
    (r"4\sqrt{3}", [r"4\sqrt{3}", r"\sqrt{48}"], [r"3\sqrt{4}", "12"]),
    ("x^2-4", ["x^2-4", "(x-2)(x+2)"], ["x^2+4", "(x-2)^2"]),
    ("20", ["20", "20.0"], ["21", "2"]),
    ("3", ["3", r"\sqrt{9}"], ["-3", "4"]),
    (r"\frac{1}{6}", [r"\frac{1}{6}", r"\frac{2}{12}"], ["6", r"\frac{1}{5}"]),
    ("-\\frac{1}{2}", ["-0.5", r"-\frac{1}{2}", r"\frac{-1}{2}"], ["0.5", "-2"]),
]

UNPARSEABLE = [
    "I am not sure how to finish this problem.",
    "The answer cannot be determined from the information given",
    "Let me think step by step... (the response was cut off",
]

# A few answers that make math-verify or sympy slow (bounded by the time limit).
PATHOLOGICAL = [
    r"\boxed{10^{10^{10^{10}}}}",
    r"\boxed{" + "{" * 50_000 + "1" + "}" * 50_000 + "}",
    r"\boxed{9^{9^{9^{9^{9}}}}}",
    r"\boxed{" + r"\sqrt{" * 3_000 + "2" + "}" * 3_000 + "}",
]
