"""The pass-rate histogram `gspo-trl filter` prints and draws.

With G samples per prompt a pass rate can only be c/G (c = 0..G), so the histogram has one
bar per possible value rather than arbitrary bins: a bar is exactly the number of prompts
with c passing samples. Bars inside the kept range are marked; the edges are inclusive.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

BAR_WIDTH = 40


def counts_by_rate(pass_rates: Sequence[float], num_samples: int) -> list[tuple[float, int]]:
    """(pass rate c/G, number of prompts) for every c in 0..G, in order."""
    counts = Counter(round(rate * num_samples) for rate in pass_rates)
    return [(c / num_samples, counts.get(c, 0)) for c in range(num_samples + 1)]


def in_range(rate: float, low: float, high: float) -> bool:
    """Whether a pass rate is kept; a hair of tolerance so that e.g. 0.1 keeps 1/10 despite rounding."""
    return low - 1e-9 <= rate <= high + 1e-9


def pass_rate_histogram(pass_rates: Sequence[float], num_samples: int, low: float, high: float) -> str:
    """One line per possible pass rate: value, prompts, a bar, and `kept` for the kept range."""
    bars = counts_by_rate(pass_rates, num_samples)
    largest = max((count for _, count in bars), default=0) or 1
    lines = ["pass_rate  prompts  "]
    for rate, count in bars:
        bar = "#" * round(BAR_WIDTH * count / largest)
        mark = "  kept" if in_range(rate, low, high) else ""
        lines.append(f"{rate:9.3f}  {count:7d}  {bar:<{BAR_WIDTH}}{mark}")
    kept = sum(in_range(rate, low, high) for rate in pass_rates)
    lines.append(f"kept {kept} of {len(pass_rates)} prompts with {low} <= pass rate <= {high}")
    return "\n".join(lines)


def plot_histogram(
    pass_rates: Sequence[float], num_samples: int, low: float, high: float, path: Path
) -> Path:
    """The same histogram as a PNG: kept bars in blue, dropped ones in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = counts_by_rate(pass_rates, num_samples)
    figure, axes = plt.subplots(figsize=(7, 4))
    colours = ["tab:blue" if in_range(rate, low, high) else "tab:gray" for rate, _ in bars]
    axes.bar([rate for rate, _ in bars], [count for _, count in bars], width=0.8 / num_samples, color=colours)
    axes.set_xlabel(f"pass rate (passing samples / {num_samples})")
    axes.set_ylabel("prompts")
    kept = sum(in_range(rate, low, high) for rate in pass_rates)
    axes.set_title(f"kept {kept} of {len(pass_rates)} prompts ({low} <= pass rate <= {high}, blue)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
