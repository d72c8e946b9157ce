"""What the console says about a mixture-of-experts model's routing, with and without replay.

The flip rate (gspo/mb{k}/routing/flip_rate, pooled as gspo/offpolicy/routing/flip_rate) is the
share of (response token, MoE layer) pairs whose router, at the current weights, picks another
top-k expert set than pi_old's. Without replay the
update ran on those other experts: the ratio compares two sub-networks. With `moe.routing_replay`
on, the update ran on the recorded experts (gspo/routing_replay/replayed_updates of the passes);
the same 60-80% then says how far the router has moved, not that replay failed. The banner and the
step line say which of the two the number means.
"""

from __future__ import annotations

import math
from typing import Any

import gspo_trl.core.metric_names as names

FLIP_KEY = names.under(names.OFFPOLICY, names.FLIP_RATE)
REPLAY_MEANING = {
    "off": "off: 'expert flips' = tokens routed to other experts than pi_old's, in the update itself",
    "old": (
        "old: updates run on pi_old's experts; 'expert flips' = where the current router would "
        "choose otherwise (replayed, so the loss did not see it)"
    ),
    "engine": (
        "engine: pi_old and the updates run on the experts vLLM sampled with; 'expert flips' = where "
        "the current router would choose otherwise (replayed)"
    ),
}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not math.isnan(value) else None


def moe_banner_line(routing: Any) -> str | None:
    """`  MoE      routing replay: ...` for a model whose routing is measured (`routing`: the run's
    MoeRouting); None otherwise."""
    if routing is None or getattr(routing, "hooks", None) is None:
        return None
    return f"  MoE      routing replay {REPLAY_MEANING[routing.config.routing_replay]}"


def flips_part(logs: dict[str, Any]) -> str | None:
    """`expert flips 12.5%`, or under replay `expert flips 72.0% (router vs replayed, replay 100%)`."""
    flips = _number(logs.get(FLIP_KEY))
    if flips is None:
        return None
    replayed = _number(logs.get(names.ROUTING_REPLAYED))
    if replayed is None:
        return f"expert flips {flips:.1%}"
    return f"expert flips {flips:.1%} (router vs replayed, replay {replayed:.0%})"
