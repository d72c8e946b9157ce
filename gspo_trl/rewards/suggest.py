"""Did-you-mean: the one home of the package's suggestions for a mistyped name.

A recipe key, a command-line flag, a shipped recipe name and a reward name are all suggested
here. difflib catches typos (`learnig_rate`); it cannot see that `lr` is `learning_rate`, so
initials (`lr` -> l[earning]_r[ate]) and unambiguous prefixes (`--learn`, as argparse's own
abbreviations) are matched first. It lives in the lowest layer (the reward library, which
imports nothing else of gspo_trl) so the reward registry and its command use it too.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable
from typing import NoReturn

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


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every long option of `parser` and of its subcommands' parsers."""
    found = []
    for action in parser._actions:
        found += [s for s in action.option_strings if s.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _option_strings(sub)
    return found


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose "unrecognized arguments" error suggests the flag meant."""

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            options = _option_strings(self)
            hints = [
                hint
                for token in message[len(prefix) :].split()
                if token.startswith("-") and (hint := did_you_mean(token.split("=")[0], options, spell="{}"))
            ]
            message += "".join(hints)
        super().error(message)
