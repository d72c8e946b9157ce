"""The commands' argument parser: argparse's, whose "unrecognized arguments" error suggests
the flag meant (did-you-mean from gspo_trl.core.suggest). Every `gspo-trl` subcommand and
the reward library's command parse their arguments with it."""

from __future__ import annotations

import argparse
from typing import NoReturn

from gspo_trl.core.suggest import did_you_mean


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
