"""What the demo's GSPO gain compares with: plain SFT on the same task, and GRPO.

The demo's "before" figure is the SFT warm start alone (the same model, the same held-out rows,
scored before the first GSPO step), so it is the plain-SFT baseline; the console names it so.
GRPO on the same task is one command away, the same demo with the recipe's `algorithm: grpo`
preset and that preset's token-level clip range (gspo_trl.config.defaults.ALGORITHMS, read here,
not copied), into its own output directory. The controlled comparison of the two objectives under
behaviour log-prob noise is scripts/bench_toy.py (its docstring gives its figures and the command
that reproduces them). No GRPO figure for the demo task is printed: none has been measured by a
command the repository ships, and a printed figure would be one.
"""

from __future__ import annotations

from gspo_trl.config.defaults import ALGORITHMS

GRPO_OUTPUT_DIR = "runs/demo-grpo"


def grpo_demo_command() -> str:
    """`gspo-trl demo` as GRPO: the grpo preset's algorithm and clip range, its own output dir."""
    grpo = ALGORITHMS["grpo"]
    return (
        f"gspo-trl demo --output-dir {GRPO_OUTPUT_DIR} --algorithm grpo "
        f"--epsilon {grpo['epsilon']:g} --epsilon_high {grpo['epsilon_high']:g}"
    )


def baseline_lines() -> list[str]:
    """The demo's closing lines on what its gain is measured against."""
    return [
        "  baselines: 'before GSPO' is plain SFT (the warm start alone) on these prompts;",
        f"    GRPO on the same task: {grpo_demo_command()}",
        "    GSPO vs GRPO under log-prob noise: scripts/bench_toy.py (its docstring has the figures)",
    ]
