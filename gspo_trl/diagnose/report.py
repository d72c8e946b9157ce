"""`gspo-trl report RUN_DIR`: PNG plots of a finished or running GSPO run, no GUI needed.

Reads `RUN_DIR/metrics.jsonl` (written as the run goes by gspo_trl.training.reporting.console_lines),
else the HF Trainer `log_history` from `RUN_DIR/trainer_state.json` or the newest
`RUN_DIR/checkpoint-*/trainer_state.json` (or the same one folder down). Writes, by default to
`RUN_DIR/report/`, one PNG per question: reward.png, clip_by_length.png, clip_by_minibatch.png,
log_ratio.png (off-policy log s_i quantiles), zero_variance.png, entropy.png, phases.png
(gspo_trl.diagnose.phase_plot), routing.png (MoE; gspo_trl.diagnose.routing_plot) and
behaviour.png (`gspo/behaviour/*`).

A metric that was never logged gives a PNG that says so, so the file set is predictable; the
exceptions are phases.png (no `perf/*` keys, older runs), routing.png (a dense model) and
behaviour.png (no engine.correction). What each plotted key means: docs/gspo.md ("The
diagnostics"), docs/performance.md, docs/moe.md.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import gspo_trl.core.metric_names as names
from gspo_trl.core.metric_names import METRICS_FILE
from gspo_trl.diagnose.phase_plot import PHASES_PNG, plot_phases
from gspo_trl.diagnose.routing_plot import ROUTING_PNG, plot_routing
from gspo_trl.model.loading.checkpoints import TRAINER_STATE, latest_checkpoint

OFFPOLICY_LENGTH_KEYS = re.escape(names.under(names.OFFPOLICY, names.clip_by_length("len_"))) + ".+"
MINIBATCH_REGION_KEYS = names.MINIBATCH_REGEX + re.escape("/" + names.CLIP_REGION)
CORRECTION_SHARE_KEYS = re.escape(names.CORRECTION) + r"/(?:rejected|truncated)(?:/len_.+)?"
BEHAVIOUR_PNG = "behaviour.png"
BEHAVIOUR_NOT_LOGGED = "no gspo/behaviour/* metrics logged (engine.correction off)"
logger = logging.getLogger(__name__)
FIGSIZE_IN, DPI = (10.0, 5.6), 100
"""Every PNG is FIGSIZE_IN * DPI = 1000 x 560 pixels."""


def find_trainer_state(run_dir: Path) -> Path:
    """RUN_DIR/metrics.jsonl or trainer_state.json, else the highest-step checkpoint-*'s
    trainer_state.json, else the same in a sub-run.

    The last case serves `gspo-trl report runs/demo`, whose GSPO run lives in runs/demo/gspo.
    """
    for folder in (run_dir, *sorted(p for p in run_dir.iterdir() if p.is_dir())) if run_dir.is_dir() else ():
        metrics = folder / METRICS_FILE
        if metrics.is_file() and metrics.stat().st_size:
            return metrics
        direct = folder / "trainer_state.json"
        if direct.is_file():
            return direct
        checkpoint = latest_checkpoint(folder, needs=TRAINER_STATE)
        if checkpoint is not None:
            return checkpoint / TRAINER_STATE
    raise FileNotFoundError(
        f"no trainer_state.json in {run_dir}, its checkpoint-*/ folders or its sub-folders: point at the "
        "run's output_dir, and let the run save a checkpoint (save_steps) or finish first"
    )


def load_log_history(run_dir: str | Path) -> list[dict]:
    """The run's log events (metrics.jsonl or the Trainer's log_history), each with a 'step'."""
    path = find_trainer_state(Path(run_dir))
    if path.name == METRICS_FILE:
        entries = read_metrics_lines(path)
    else:
        entries = json.loads(path.read_text()).get("log_history", [])
    return [entry for entry in entries if "step" in entry]


def read_metrics_lines(path: Path) -> list[dict]:
    """metrics.jsonl's events; a line that is not UTF-8 JSON of an object (a crash or a full
    disk mid-write, a stray edit) is skipped, and the skipped lines are counted in a warning."""
    entries, bad = [], []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            entry = None
        if isinstance(entry, dict):
            entries.append(entry)
        else:
            bad.append(number)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        logger.warning("%s: skipped %d corrupt line(s) (line %s)", path, len(bad), shown)
    return entries


def series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric in step order, skipping entries without it or with a null
    value, one value per step: the last one logged.

    A resumed run logs some steps twice in the same metrics.jsonl: its held-out score at the
    resume step (the first run measured the same checkpoint's weights there too), and the
    steps the first run logged after its last checkpoint, which the resumed run trains again.
    The last row is the one of the run that continues to the end; keeping both drew a vertical
    jump at that step (and, for the retrained steps, a line going back in steps).
    """
    last = {e["step"]: float(e[key]) for e in history if isinstance(e.get(key), int | float)}
    steps = sorted(last)
    return steps, [last[step] for step in steps]


def keys_matching(history: list[dict], pattern: str) -> list[str]:
    regex = re.compile(pattern)
    return sorted({k for e in history for k in e if regex.fullmatch(k)})


def _bucket_order(key: str) -> float:
    low = re.search(r"len_(\d+)-", key)
    return float(low.group(1)) if low else float("inf")


def _length_label(key: str) -> str:
    """'gspo/offpolicy/clip/len_64-256' -> '64-256 tokens'; '.../len_1024-inf' -> '>= 1024 tokens'."""
    name = key.rsplit("/", 1)[1]
    if name == "region":
        return "all lengths"
    low, high = name[len("len_") :].split("-")
    return f">= {low} tokens" if high == "inf" else f"{low}-{high} tokens"


def _new_figure(title: str, ylabel: str):
    fig, ax = plt.subplots(figsize=FIGSIZE_IN, dpi=DPI)
    ax.set_title(title, fontsize=14)
    ax.set_xlabel("optimizer step", fontsize=12)
    ax.set_ylabel(ylabel, fontsize=12)
    ax.grid(alpha=0.3)
    return fig, ax


def _finish(fig, ax, path: Path, plotted: bool, missing: str) -> bool:
    if plotted:
        ax.legend(loc="best", fontsize=10)
    else:
        ax.text(
            0.5, 0.5, f"no data: {missing}", ha="center", va="center", transform=ax.transAxes, fontsize=13
        )
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return plotted


def heldout_label(key: str) -> str:
    """'heldout/score' -> 'held-out score (greedy)', 'eval_heldout/pass@4' -> 'held-out pass@4 (eval)'."""
    name = key.split(names.HELDOUT + "/", 1)[1]
    label = "held-out score (greedy)" if name == "score" else f"held-out {name}"
    if name.startswith("pass@"):
        label += " (sampled)"
    return label + (" (eval)" if key.startswith("eval_") else "")


def std_band(mean: list[float], std: list[float], values: list[float]) -> tuple[list[float], list[float]]:
    """mean -+ std, kept inside the range the plotted scores live in: [0, 1] widened to
    `values` (a 0-1 reward's band stops at 1.0; a reward that reaches 3 may go to 3)."""
    lowest, highest = min([0.0, *values]), max([1.0, *values])
    low = [max(lowest, m - s) for m, s in zip(mean, std, strict=True)]
    high = [min(highest, m + s) for m, s in zip(mean, std, strict=True)]
    return low, high


def plot_reward(history: list[dict], path: Path) -> bool:
    fig, ax = _new_figure("Reward and held-out score", "score")
    plotted = False
    scores = [  # held-out scores; heldout/judged is coverage (share of rows graded), not a score
        k
        for k in keys_matching(history, rf"(eval_)?{names.HELDOUT}/.+")
        if not k.endswith(names.HELDOUT_JUDGED)
    ]
    values_seen = [v for key in ["reward", *scores] for v in series(history, key)[1]]
    steps, mean = series(history, "reward")
    if steps:
        ax.plot(steps, mean, label="train reward (mean)", color="C0")
        s_std, std = series(history, "reward_std")
        if s_std == steps:
            low, high = std_band(mean, std, values_seen)
            ax.fill_between(steps, low, high, color="C0", alpha=0.15, label="train reward ± std")
        plotted = True
    for i, key in enumerate(scores):
        steps, values = series(history, key)
        ax.plot(steps, values, marker="o", label=heldout_label(key), color=f"C{i + 1}")
        plotted = True
    return _finish(fig, ax, path, plotted, "'reward' / 'heldout/*' not logged")


def plot_lines(
    history: list[dict],
    path: Path,
    title: str,
    ylabel: str,
    keys: list[str],
    label: Callable[[str], str],
    fraction: bool = False,
) -> bool:
    """One line per metric key; `fraction` pins the y axis to 0-1."""
    fig, ax = _new_figure(title, ylabel)
    if fraction:
        ax.set_ylim(-0.03, 1.03)
    plotted = False
    for key in keys:
        steps, values = series(history, key)
        if steps:
            ax.plot(steps, values, marker=".", label=label(key))
            plotted = True
    return _finish(fig, ax, path, plotted, ", ".join(keys) or "metric not logged")


def plot_log_ratio(history: list[dict], path: Path) -> bool:
    fig, ax = _new_figure("Off-policy log s_i quantiles (minibatches 2..k)", "log s_i (nats / token)")
    key = lambda stat: names.under(names.OFFPOLICY, names.log_ratio(stat))  # noqa: E731
    steps, p50 = series(history, key("p50"))
    if steps:
        q = {k: dict(zip(*series(history, key(k)), strict=True)) for k in ("p5", "p95", "min", "max")}
        low, high = [q["p5"][s] for s in steps], [q["p95"][s] for s in steps]
        ax.fill_between(steps, low, high, alpha=0.25, color="C0", label="p5-p95")
        ax.plot(steps, p50, color="C0", label="p50")
        ax.plot(steps, [q["min"][s] for s in steps], ":", color="C3", label="min")
        ax.plot(steps, [q["max"][s] for s in steps], ":", color="C2", label="max")
        ax.axhline(0.0, color="black", lw=0.8)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    return _finish(
        fig, ax, path, bool(steps), f"'{key('*')}' not logged (a GSPOTrainer run with off-policy updates)"
    )


def _behaviour_label(key: str) -> str:
    """'gspo/behaviour/rejected/len_6-8' -> 'rejected, 6-8 tokens'; '.../rejected' -> 'rejected'."""
    share, _, bucket = key.removeprefix(names.CORRECTION + "/").partition("/")
    return share if not bucket else f"{share}, {_length_label(key)}"


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, bool | None]:
    """Write the PNGs; returns {file name: True if it holds data, False if a 'no data' card,
    None if not written (phases.png of a run without perf/* keys, routing.png of a dense model,
    behaviour.png of a run without engine.correction)}."""
    history = load_log_history(run_dir)
    out = Path(out_dir) if out_dir else Path(run_dir) / "report"
    out.mkdir(parents=True, exist_ok=True)
    region = names.under(names.OFFPOLICY, names.CLIP_REGION)
    len_keys = sorted(keys_matching(history, OFFPOLICY_LENGTH_KEYS), key=_bucket_order)
    mb_keys = sorted(keys_matching(history, MINIBATCH_REGION_KEYS), key=lambda k: int(k.split("/")[1][2:]))
    behaviour = sorted(
        keys_matching(history, CORRECTION_SHARE_KEYS), key=lambda k: (k.count("/"), _bucket_order(k), k)
    )
    zero_var = keys_matching(history, re.escape(names.ZERO_VARIANCE_GROUPS)) or keys_matching(
        history, names.TRL_ZERO_VARIANCE
    )
    return {
        "reward.png": plot_reward(history, out / "reward.png"),
        "clip_by_length.png": plot_lines(
            history,
            out / "clip_by_length.png",
            "Off-policy clip fraction by response length",
            "fraction of responses clipped",
            [*len_keys, *keys_matching(history, re.escape(region))],
            _length_label,
            fraction=True,
        ),
        "clip_by_minibatch.png": plot_lines(
            history,
            out / "clip_by_minibatch.png",
            "Clip fraction by update within a rollout batch",
            "fraction of responses clipped",
            mb_keys,
            lambda k: k.split("/")[1] + (" (on-policy)" if k.split("/")[1] == "mb1" else ""),
            fraction=True,
        ),
        "log_ratio.png": plot_log_ratio(history, out / "log_ratio.png"),
        "zero_variance.png": plot_lines(
            history,
            out / "zero_variance.png",
            "Zero-variance groups (all rewards tie: no signal)",
            "fraction of groups",
            zero_var,
            lambda k: k,
            fraction=True,
        ),
        "entropy.png": plot_lines(
            history,
            out / "entropy.png",
            "Policy token entropy",
            "nats / token",
            ["entropy"],
            lambda k: "entropy",
        ),
        PHASES_PNG: plot_phases(history, out / PHASES_PNG),
        ROUTING_PNG: plot_routing(history, out / ROUTING_PNG),
        BEHAVIOUR_PNG: plot_lines(
            history,
            out / BEHAVIOUR_PNG,
            "engine.correction: responses rejected or truncated, per rollout batch",
            "fraction of responses",
            behaviour,
            _behaviour_label,
            fraction=True,
        )
        if behaviour
        else None,
    }
