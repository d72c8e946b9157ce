"""`gspo-trl report`'s phases.png: where each logging window's seconds went, and the throughput.

Top panel: one stacked bar per logged window (x = its optimizer step), one segment per phase
of gspo_trl.core.metric_names.PHASES plus `other`, in seconds; the segments sum to the window's
`perf/wall_s` (gspo_trl.training.reporting.phases). Bottom panel: trained tokens/s per process
(`perf/trained_tokens_per_s`) and, on its own axis, the update phase's MFU in percent
(`perf/mfu`), each when logged. A run without `perf/*` keys (one from before the phase
timings) gets no phases.png: `plot_phases` returns None and writes nothing.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import gspo_trl.core.metric_names as names

PHASES_PNG = "phases.png"
FIGSIZE_IN, DPI = (10.0, 8.0), 100
"""phases.png is FIGSIZE_IN * DPI = 1000 x 800 pixels (two panels)."""
STACK = (*names.PHASES, names.PHASE_OTHER)
"""The phases bottom to top; `other` (the remainder) last, in grey."""
PALETTE = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9")
"""Matplotlib's cycle without its grey (C7): only `other` (OTHER_COLOUR) is grey."""
OTHER_COLOUR = "0.75"
NOT_LOGGED_NOTE = "no perf/* metrics logged (a run from before the phase timings)"


def _windows(history: list[dict]) -> list[dict]:
    """The training log events that carry phase seconds (one per logging window)."""
    keys = [names.perf_seconds(p) for p in STACK]
    return [e for e in history if any(isinstance(e.get(k), int | float) for k in keys)]


def _series(events: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(e["step"], float(e[key])) for e in events if isinstance(e.get(key), int | float)]
    return [s for s, _ in points], [v for _, v in points]


def plot_phases(history: list[dict], path: Path) -> bool | None:
    """Write phases.png from the run's log events; None (nothing written) without perf/* keys."""
    windows = _windows(history)
    if not windows:
        return None
    steps = [e["step"] for e in windows]
    gaps = [b - a for a, b in itertools.pairwise(steps) if b > a]
    width = 0.8 * min(gaps, default=1)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=FIGSIZE_IN, dpi=DPI, sharex=True, height_ratios=(3, 2))
    base = [0.0] * len(windows)
    colours = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(names.PHASES)}
    colours[names.PHASE_OTHER] = OTHER_COLOUR
    for phase in STACK:
        seconds = [float(e.get(names.perf_seconds(phase)) or 0.0) for e in windows]
        if not any(seconds):
            continue
        top.bar(steps, seconds, width, bottom=base, color=colours[phase], label=phase)
        base = [b + s for b, s in zip(base, seconds, strict=True)]
    top.set_title("Where each logging window's time went (phases are disjoint)", fontsize=14)
    top.set_ylabel("seconds per window (s)", fontsize=12)
    top.grid(axis="y", alpha=0.3)
    handles, labels = top.get_legend_handles_labels()  # listed top to bottom, as stacked
    top.legend(
        handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10, title="phase"
    )

    bottom.set_title("Throughput", fontsize=12)
    bottom.set_xlabel("optimizer step", fontsize=12)
    bottom.grid(alpha=0.3)
    lines = []
    tok_steps, tok = _series(windows, names.PERF_TRAINED_TOKENS_PER_S)
    if tok_steps:
        lines += bottom.plot(tok_steps, tok, marker="o", color="C0", label="trained tokens/s per process")
    bottom.set_ylabel("trained tokens/s", fontsize=12, color="C0")
    mfu_steps, mfu = _series(windows, names.PERF_MFU)
    if mfu_steps:
        right = bottom.twinx()
        lines += right.plot(
            mfu_steps, [100 * m for m in mfu], marker="s", color="C3", label="MFU of the update phase (%)"
        )
        right.set_ylabel("MFU (%)", fontsize=12, color="C3")
        right.set_ylim(bottom=0)
    if lines:
        bottom.set_ylim(bottom=0)
        bottom.legend(
            lines, [line.get_label() for line in lines], loc="upper left", bbox_to_anchor=(1.08, 1.0)
        )
    else:
        bottom.text(
            0.5, 0.5, "tokens/s and MFU not logged", ha="center", va="center", transform=bottom.transAxes
        )
    if len(steps) <= 20:
        bottom.set_xticks(steps)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True
