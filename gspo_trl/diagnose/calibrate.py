"""`gspo-trl calibrate`: measure log s_i on off-policy minibatches, recommend eps_low / eps_high.

    gspo-trl calibrate RECIPE.yaml [--batches 3] [--target-range 0.15 0.25] [--key value ...]
        trains the recipe's trainer for `--batches` rollout batches in a throw-away output dir
        (nothing saved) and keeps log s_i of every response on minibatches 2..k.
    gspo-trl calibrate --from-run RUN_DIR
        reads an existing run's logged gspo/offpolicy/* statistics (trainer_state.json).

eps_high is set from the positive-advantage responses, eps_low from the negative ones, each to
clip a share t (the middle of the target range); the printout shows the measured distribution,
the per-length spread, the clip rates of the current and recommended ranges, and the reasoning.
The rule and why: docs/gspo.md ("Choosing epsilon"). In Python: `calibrate(CalibrateSettings(...))`.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import gspo_trl.core.metric_names as names
from gspo_trl.core.errors import UserError
from gspo_trl.training.ratio_stats import (
    bucket_labels,
    clip_fraction_by_length,
    clip_fractions,
    column,
    log_ratio_quantiles,
    real_rows,
)

MIN_EPS = 1e-6
"""Floor for a recommended eps: below float32 resolution of s_i near 1 it means nothing."""
MIN_PER_SIGN = 20
"""Fewer responses of one advantage sign than this: use all responses for that side."""


@dataclass(frozen=True)
class CalibrateSettings:
    """What to calibrate on; each field is the `gspo-trl calibrate` option of the same name.

    `recipe` (with `overrides`: --key value pairs or a {key: value} dict) trains `batches`
    rollout batches; `from_run` reads a run's logged statistics instead.
    """

    recipe: str | Path | None = None
    overrides: Sequence[str] | Mapping[str, Any] = ()
    from_run: str | Path | None = None
    batches: int = 3
    target_range: tuple[float, float] = (0.15, 0.25)
    """Share of off-policy responses to clip per advantage sign; the middle is aimed at."""
    output_dir: str | None = None
    """Where the throw-away run writes; None: a temporary directory."""

    def __post_init__(self) -> None:
        low, high = self.target_range
        if not 0 < low <= high < 1:
            raise UserError(f"--target-range needs 0 < LOW <= HIGH < 1, got {low} {high}")
        if self.recipe is None and self.from_run is None:
            raise UserError("give a RECIPE or --from-run RUN_DIR")


@dataclass(frozen=True)
class Calibration:
    """The printed analysis and, from a recipe with enough responses of each sign, the recommendation."""

    report: str
    recommendation: Recommendation | None
    current: tuple[float, float] | None
    """The eps the recipe trains with (None from a run log)."""


@dataclass
class Recommendation:
    eps_low: float
    eps_high: float
    target: float
    high_from: str  # which responses set eps_high, e.g. "the 57 A>0 responses"
    low_from: str


def _side(log_s: torch.Tensor, sel: torch.Tensor, sign: str) -> tuple[torch.Tensor, str]:
    n = int(sel.sum())
    if n >= MIN_PER_SIGN:
        return log_s[sel].double(), f"the {n} {sign} responses"
    return log_s.double(), f"all {log_s.numel()} responses (only {n} with {sign}, fewer than {MIN_PER_SIGN})"


def recommend(log_s: torch.Tensor, adv: torch.Tensor, target: float) -> Recommendation:
    """eps per side so that a share `target` of that side's advantage sign is clipped."""
    pos, high_from = _side(log_s, adv > 0, "A>0")
    neg, low_from = _side(log_s, adv < 0, "A<0")
    eps_high = math.exp(torch.quantile(pos, 1 - target).item()) - 1
    eps_low = 1 - math.exp(torch.quantile(neg, target).item())
    return Recommendation(
        eps_low=min(max(eps_low, MIN_EPS), 0.99),
        eps_high=max(eps_high, MIN_EPS),
        target=target,
        high_from=high_from,
        low_from=low_from,
    )


def log_ratio_histogram(values: torch.Tensor, bins: int = 16, width: int = 48) -> str:
    """A terminal histogram: one line per bin, '#' bars scaled to the fullest bin."""
    v = values.double()
    lo, hi = v.min().item(), v.max().item()
    if hi - lo < 1e-12:
        return f"  all {v.numel()} values = {lo:+.3e}"
    counts = torch.histc(v, bins=bins, min=lo, max=hi)
    edges = torch.linspace(lo, hi, bins + 1)
    top = counts.max().item()
    return "\n".join(
        f"  [{edges[i]:+.3e}, {edges[i + 1]:+.3e}) {int(c):>6} {'#' * round(width * c / top)}"
        for i, c in enumerate(counts.tolist())
    )


def length_table(
    log_s: torch.Tensor,
    adv: torch.Tensor,
    lengths: torch.Tensor,
    buckets: tuple[int, ...],
    current: tuple[float, float],
    rec: Recommendation | None,
) -> str:
    """Per length bucket: count, spread of log s_i and clip rate now / with the recommendation
    (that column only when there is one)."""
    header = f"  {'bucket':>14} {'n':>6} {'std':>10} {'p5':>11} {'p95':>11} {'clip now':>9}"
    lines = [header + (f" {'clip rec':>9}" if rec else "")]
    edges = [0, *buckets, math.inf]
    now = clip_fraction_by_length(log_s, adv, lengths, *current, buckets)
    new = clip_fraction_by_length(log_s, adv, lengths, rec.eps_low, rec.eps_high, buckets) if rec else {}
    for label, lo, hi in zip(bucket_labels(buckets), edges[:-1], edges[1:], strict=True):
        sel = (lengths >= lo) & (lengths < hi)
        if not sel.any():
            continue
        q = log_ratio_quantiles(log_s[sel])
        lines.append(
            f"  {label[4:] + ' tok':>14} {int(sel.sum()):>6} {q['std']:>10.2e} {q['p5']:>+11.2e} "
            f"{q['p95']:>+11.2e} {now['clip/' + label]:>9.1%}"
            + (f" {new['clip/' + label]:>9.1%}" if rec else "")
        )
    return "\n".join(lines)


def analyse_rows(
    rows_by_mb: list[tuple[int, torch.Tensor]],
    current: tuple[float, float],
    target_range: tuple[float, float],
    buckets: tuple[int, ...],
) -> str:
    """The calibration report for raw rows (columns: diagnostics.ROW_COLUMNS)."""
    rows = off_policy_rows(rows_by_mb)
    if rows is None:
        return "no off-policy minibatch was recorded: steps_per_generation * num_iterations must be > 1"
    log_s, adv, lengths = column(rows, "log_ratio"), column(rows, "advantage"), column(rows, "length")
    target = sum(target_range) / 2
    rec = recommend(log_s, adv, target)
    q = log_ratio_quantiles(log_s)
    now = clip_fractions(log_s, adv, *current)
    new = clip_fractions(log_s, adv, rec.eps_low, rec.eps_high)
    per_mb = []
    for mb in sorted({mb for mb, _ in rows_by_mb if mb >= 2}):
        r = torch.cat([real_rows(x) for m, x in rows_by_mb if m == mb]).double()
        mq = log_ratio_quantiles(column(r, "log_ratio"))
        per_mb.append(f"mb{mb}: p5 {mq['p5']:+.2e}, p95 {mq['p95']:+.2e}")
    verdict = _verdict(log_s, adv, current, target_range)
    judgeable = _judgeable(adv)
    summary = [
        f"log s_i on {len(log_s)} off-policy responses (minibatches 2..k), nats per token:",
        f"  mean {q['mean']:+.2e}  std {q['std']:.2e}  p5 {q['p5']:+.2e}  p50 {q['p50']:+.2e}  "
        f"p95 {q['p95']:+.2e}  min {q['min']:+.2e}  max {q['max']:+.2e}",
        log_ratio_histogram(log_s),
        "",
        "Spread by response length (log s_i is a token mean: its spread shrinks ~1/sqrt(length)):",
        length_table(log_s, adv, lengths, buckets, current, rec if judgeable else None),
        "",
        f"{'':24}{'eps_low':>10} {'eps_high':>10} {'clipped':>8} {'A>0 clip':>9} {'A<0 clip':>9}",
        _clip_line("current", current, now),
    ]
    zero_advantage = (
        f"- {float((adv == 0).double().mean()):.0%} of these responses have zero advantage "
        "(tied groups): they never clip and carry no signal."
    )
    if not judgeable:  # a recommendation from tied groups would be noise dressed as advice
        return "\n".join([*summary, "", "No recommendation:", f"- Current range: {verdict}", zero_advantage])
    return "\n".join(
        [
            *summary,
            _clip_line("recommended", (rec.eps_low, rec.eps_high), new),
            "",
            "Reasoning:",
            f"- Target: {target_range[0]:.0%}-{target_range[1]:.0%} of off-policy responses clipped "
            f"(aim {target:.0%}). Fewer = the trust region does nothing; more than ~50% of A>0 "
            "responses = minibatches 2..k are wasted.",
            f"- eps_high = exp(q{1 - target:.2f} of log s_i over {rec.high_from}) - 1 = {rec.eps_high:.3g}; "
            f"eps_low = 1 - exp(q{target:.2f} over {rec.low_from}) = {rec.eps_low:.3g}. Only A>0 "
            f"responses clip high and A<0 low (PPO's min), so each sign loses ~{target:.0%}; "
            "zero-advantage responses (tied groups) never clip.",
            f"- Current range: {verdict}",
            zero_advantage,
            f"- Drift grows with the update index ({'; '.join(per_mb)}) and with the learning rate: "
            "re-calibrate after changing lr, batch size or steps_per_generation.",
            "- Short responses have the widest log s_i, so they clip first (see the table); if length "
            "correlates with correctness this skews learning.",
            f"- Measured with the recipe's current eps and lr on {len(log_s)} responses; quantiles of "
            "a few hundred responses move by a few percent between runs.",
        ]
    )


def off_policy_rows(rows_by_mb: list[tuple[int, torch.Tensor]]) -> torch.Tensor | None:
    """The real rows of minibatches 2..k, pooled (float64); None when there are none."""
    off = [real_rows(rows) for mb, rows in rows_by_mb if mb >= 2]
    return torch.cat(off).double() if off else None


def _judgeable(adv: torch.Tensor) -> bool:
    """Enough responses with a learning signal (A != 0) to recommend from."""
    return int((adv != 0).sum()) >= MIN_PER_SIGN


def recommend_from_rows(
    rows_by_mb: list[tuple[int, torch.Tensor]], target_range: tuple[float, float]
) -> Recommendation | None:
    """What `analyse_rows` recommends; None where it recommends nothing."""
    rows = off_policy_rows(rows_by_mb)
    if rows is None or not _judgeable(column(rows, "advantage")):
        return None
    return recommend(column(rows, "log_ratio"), column(rows, "advantage"), sum(target_range) / 2)


def _clip_line(name: str, eps: tuple[float, float], stats: dict[str, float]) -> str:
    return (
        f"  {name:<22}{eps[0]:>10.3g} {eps[1]:>10.3g} {stats['clip/region']:>8.1%} "
        f"{stats.get('clip/pos_adv', math.nan):>9.1%} {stats.get('clip/neg_adv', math.nan):>9.1%}"
    )


def _verdict(
    log_s: torch.Tensor, adv: torch.Tensor, current: tuple[float, float], target_range: tuple[float, float]
) -> str:
    """Judge the current range on responses with a learning signal (A != 0)."""
    signed = adv != 0
    n_signed, n_pos = int(signed.sum()), int((adv > 0).sum())
    if n_signed < MIN_PER_SIGN:
        return (
            f"only {n_signed} of {len(adv)} responses have a non-zero advantage (the rest sit in tied "
            "groups): too few to judge; run more --batches or start from a model with a mixed pass rate."
        )
    now = clip_fractions(log_s[signed], adv[signed], *current)
    clipped, pos = now["clip/region"], now.get("clip/pos_adv", 0.0)
    if pos > 0.5 and n_pos >= MIN_PER_SIGN:
        return f"EVERYTHING CLIPPED: {pos:.0%} of A>0 responses are dropped; widen eps_high (or lower lr)."
    if clipped < target_range[0]:
        return (
            f"clips only {clipped:.0%} of responses with A != 0: the range is wider than the drift; "
            "narrow it or take larger steps."
        )
    if clipped > target_range[1]:
        return f"clips {clipped:.0%} of responses with A != 0, above the target: widen it."
    return f"clips {clipped:.0%} of responses with A != 0, inside the target range: keep it."


def calibrate(settings: CalibrateSettings) -> Calibration:
    """Measure log s_i (a short throw-away run of the recipe, or a run's log) and recommend eps."""
    if settings.from_run is not None:
        try:
            report = analyse_run(str(settings.from_run), settings.target_range)
        except FileNotFoundError as error:
            raise UserError(str(error)) from None
        return Calibration(report, None, None)
    rows, eps, buckets = calibrate_recipe(
        str(settings.recipe), settings.overrides, settings.batches, settings.output_dir
    )
    heading = f"\nCalibration of {settings.recipe} over {settings.batches} rollout batches\n"
    report = heading + analyse_rows(rows, eps, settings.target_range, buckets)
    return Calibration(report, recommend_from_rows(rows, settings.target_range), eps)


def calibrate_recipe(
    recipe_path: str, overrides: Sequence[str] | Mapping[str, Any], batches: int, output_dir: str | None
):
    """Train `batches` rollout batches of the recipe; return (rows by minibatch, eps, buckets)."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import build_trainer
    from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
    from gspo_trl.training.reporting.step_progress import show_steps_as_bar

    with tempfile.TemporaryDirectory(prefix="gspo-calibrate-") as tmp:
        recipe = load_recipe(recipe_path, overrides)
        steps = recipe.training.get("steps_per_generation") or 4
        forced = {
            "save_strategy": "no",
            "report_to": "none",
            "logging_steps": 1,
            "max_steps": batches * steps,
        }
        forced["output_dir"] = output_dir or tmp
        recipe = dataclasses.replace(recipe, training={**recipe.training, **forced}, heldout=None)
        trainer = build_trainer(recipe)
        show_steps_as_bar(trainer, "calibrate")  # stdout is for the report
        diagnostics = trainer.probes.find(DiagnosticsProbe)
        diagnostics.row_sink = []
        print(f"calibrate: training {batches} rollout batches ({batches * steps} updates), nothing saved")
        trainer.train()
        return (
            diagnostics.row_sink,
            (trainer.epsilon_low, trainer.epsilon_high),
            diagnostics.config.length_buckets,
        )


def analyse_run(run_dir: str, target_range: tuple[float, float]) -> str:
    """Calibration from a run's logged statistics: a normal fit per logged step."""
    from gspo_trl.diagnose.report import OFFPOLICY_LENGTH_KEYS, keys_matching, load_log_history

    def key(stat: str) -> str:
        return names.under(names.OFFPOLICY, stat)

    history = [e for e in load_log_history(run_dir) if key(names.log_ratio("std")) in e]
    if not history:
        return f"{run_dir}: no {key('*')} statistics logged (a GSPOTrainer run with off-policy updates)"
    target = sum(target_range) / 2
    normal = torch.distributions.Normal(0.0, 1.0)
    mu = torch.tensor([e[key(names.log_ratio("mean"))] for e in history], dtype=torch.float64)
    sd = torch.tensor([max(e[key(names.log_ratio("std"))], 1e-12) for e in history], dtype=torch.float64)

    def upper_tail(x: float) -> float:  # share of the fitted mixture above x
        return (1 - normal.cdf((x - mu) / sd)).mean().item()

    hi = _bisect(lambda x: upper_tail(x) - target, -1.0, 1.0)
    lo = _bisect(lambda x: target - (1 - upper_tail(x)), -1.0, 1.0)
    mean_of = lambda k: sum(e.get(k, 0.0) for e in history) / len(history)  # noqa: E731
    quantile = lambda q: mean_of(key(names.log_ratio(q)))  # noqa: E731
    lines = [
        f"{len(history)} logged steps with off-policy data in {run_dir}",
        f"  log s_i: mean of p5 {quantile('p5'):+.2e}, of p50 {quantile('p50'):+.2e}, "
        f"of p95 {quantile('p95'):+.2e}",
        f"  logged clip fractions (mean over steps): all {mean_of(key(names.CLIP_REGION)):.1%}, "
        f"A>0 {mean_of(key(names.CLIP_POS_ADV)):.1%}, A<0 {mean_of(key(names.CLIP_NEG_ADV)):.1%}",
    ]
    for length_key in keys_matching(history, OFFPOLICY_LENGTH_KEYS):
        lines.append(f"    {length_key.rsplit('/', 1)[1]:>16}: {mean_of(length_key):.1%}")
    lines += [
        f"Recommended for {target:.0%} clipped per side: eps_low {max(1 - math.exp(lo), MIN_EPS):.3g}, "
        f"eps_high {max(math.exp(hi) - 1, MIN_EPS):.3g}",
        "Reasoning: the log only holds per-step mean and std of log s_i, so each step is fitted as a "
        "normal and eps is set where the pooled fit leaves the target share outside each side; this "
        "assumes the advantage sign is independent of log s_i. Prefer calibrating on the recipe "
        "(raw per-response values) when you can.",
    ]
    return "\n".join(lines)


def _bisect(f, lo: float, hi: float, iters: int = 80) -> float:
    """Root of a decreasing function f on [lo, hi]."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return (lo + hi) / 2
