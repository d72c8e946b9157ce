"""Exceptions the recipe layer catches to report a bad reward spec at validation time."""

from __future__ import annotations


class UnknownRewardError(ValueError):
    """A reward name or path that resolves to nothing; the message names it and the closest candidates."""


class RewardParameterError(ValueError):
    """A parameter a reward does not take, lacks, or cannot accept; the message names both."""
