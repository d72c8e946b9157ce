"""`gspo-trl report`'s routing.png: how far a mixture-of-experts model's routing moved.

Top panel: the flip rate of each update index within a rollout batch (`gspo/mb{k}/routing/
flip_rate`: the share of (response token, layer) expert sets that differ from pi_old's; mb1 is
on-policy and stays at 0), and, with `moe.routing_replay: engine`, the engine's routing against
the trainer's (`gspo/engine_routing/flip_rate`). Bottom panel: the off-policy minibatches' worst
layer and worst response (`.../flip_rate_layer_max`, `.../flip_rate_response_max`), which a mean
hides. A run without routing keys (a dense model) gets no routing.png: `plot_routing` returns
None and writes nothing. With routing replay on, the title says so: the flip rate is then where
the router would choose otherwise, the update having run on the replayed experts. docs/moe.md says
what the numbers mean.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import gspo_trl.core.metric_names as names

ROUTING_PNG = "routing.png"
FIGSIZE_IN, DPI = (10.0, 8.0), 100
"""routing.png is FIGSIZE_IN * DPI = 1000 x 800 pixels (two panels)."""
NOT_LOGGED_NOTE = "no gspo/*/routing/* metrics logged (a dense model, or diagnostics off)"
MINIBATCH_FLIP_KEY = re.compile(names.MINIBATCH_REGEX + re.escape("/" + names.FLIP_RATE))


def _series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    last = {e["step"]: float(e[key]) for e in history if isinstance(e.get(key), int | float)}
    steps = sorted(last)
    return steps, [100 * last[s] for s in steps]


def _minibatch(key: str) -> int:
    return int(key.split("/")[1][2:])


def routing_title(history: list[dict]) -> str:
    """The top panel's title: what the flip rate means, which replay changes (gspo_trl.training.
    reporting.moe_lines): without it, experts the update used; with it, the router's would-be choice."""
    replayed = [
        e[names.ROUTING_REPLAYED] for e in history if isinstance(e.get(names.ROUTING_REPLAYED), int | float)
    ]
    if not replayed:
        return "MoE routing: expert sets that differ from pi_old's (response tokens x layers)"
    low, high = f"{100 * min(replayed):.0f}%", f"{100 * max(replayed):.0f}%"
    share = low if low == high else f"{low}-{high}"
    return (
        f"MoE routing, replay ON ({share} of updates replayed): "
        "expert sets the current router\nwould choose that differ from the replayed ones "
        "(the loss used the replayed)"
    )


def plot_routing(history: list[dict], path: Path) -> bool | None:
    """Write routing.png from the run's log events; None (nothing written) without routing keys."""
    per_update = sorted({k for e in history for k in e if MINIBATCH_FLIP_KEY.fullmatch(k)}, key=_minibatch)
    engine = (
        [names.ENGINE_ROUTING_FLIP_RATE] if any(names.ENGINE_ROUTING_FLIP_RATE in e for e in history) else []
    )
    if not per_update and not engine:
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=FIGSIZE_IN, dpi=DPI, sharex=True, height_ratios=(3, 2))
    top.set_title(routing_title(history), fontsize=12)
    for key in per_update:
        label = key.split("/")[1] + (" (on-policy)" if _minibatch(key) == 1 else "")
        top.plot(*_series(history, key), marker=".", label=label)
    pooled = _series(history, names.under(names.OFFPOLICY, names.FLIP_RATE))
    if pooled[0]:
        top.plot(*pooled, color="black", lw=2, label="off-policy (mb2..)")
    for key in engine:
        top.plot(*_series(history, key), "k--", marker="x", label="engine vs trainer (pi_old)")
    top.set_ylabel("flip rate (%)", fontsize=12)
    top.set_ylim(bottom=0)
    top.grid(alpha=0.3)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10, title="update")

    bottom.set_title("Off-policy minibatches: worst layer and worst response", fontsize=12)
    plotted = False
    for stat, label in (
        (names.FLIP_RATE_LAYER_MAX, "worst layer"),
        (names.FLIP_RATE_RESPONSE_MAX, "worst response"),
    ):
        steps, values = _series(history, names.under(names.OFFPOLICY, stat))
        if steps:
            bottom.plot(steps, values, marker=".", label=label)
            plotted = True
    bottom.set_ylabel("flip rate (%)", fontsize=12)
    bottom.set_xlabel("optimizer step", fontsize=12)
    bottom.grid(alpha=0.3)
    if plotted:
        bottom.set_ylim(bottom=0)
        bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=10)
    else:
        bottom.text(
            0.5, 0.5, "no off-policy update logged", ha="center", va="center", transform=bottom.transAxes
        )
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True
