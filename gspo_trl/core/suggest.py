"""Did-you-mean: the one home of the package's suggestions for a mistyped name.

A recipe key, a command-line flag, a shipped recipe name and a reward name are all suggested
here. difflib catches typos (`learnig_rate`); it cannot see that `lr` is `learning_rate`, so
initials (`lr` -> l[earning]_r[ate]) and unambiguous prefixes (`--learn`, as argparse's own
abbreviations) are matched first. It lives on the ground floor (gspo_trl.core), under the
reward library and the recipe configuration, which both use it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

MIN_PREFIX = 3
"""A prefix this long or longer suggests the one candidate it starts (`lea` -> learning_rate)."""


def _initials(name: str) -> str:
    return "".join(part[0] for part in re.split(r"[_.\-/]+", name) if part)


def close_matches(name: str, candidates: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """Up to `n` candidates `name` probably meant: initials, then a unique prefix, then difflib."""
    pool = list(dict.fromkeys(candidates))
    bare = name.strip("-").replace("-", "_")
    # Initials can fit several (`lr`: learning_rate, local_rank): all are named, in a fixed order.
    initials = sorted(c for c in pool if len(bare) >= 2 and _initials(c.strip("-")) == bare)
    found = list(initials)
    prefixed = [c for c in pool if len(bare) >= MIN_PREFIX and c.strip("-").startswith(bare)]
    if len(prefixed) == 1:
        found += prefixed
    found += difflib.get_close_matches(name, pool, n=n, cutoff=cutoff)
    return list(dict.fromkeys(found))[: max(n, len(initials))]


def did_you_mean(name: str, candidates: Iterable[str], n: int = 1, spell: str = "{!r}") -> str:
    """' (did you mean X?)' for the closest candidates, or '' when nothing is close; `spell`
    formats each (`--{}` for a flag)."""
    close = close_matches(name, candidates, n=n)
    return f" (did you mean {' or '.join(spell.format(c) for c in close)}?)" if close else ""
