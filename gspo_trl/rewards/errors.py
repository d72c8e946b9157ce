"""The reward library's errors: all are the user's to fix (the message names the reward, the
parameter or the definition). gspo_trl.errors re-exports them with the package's own, and its
command line reports them in one line; they live here because the reward library imports no
other room of gspo_trl."""

from __future__ import annotations


class UnknownRewardError(ValueError):
    """A reward name or path that resolves to nothing; the message names it and the closest candidates."""


class RewardParameterError(ValueError):
    """A parameter a reward does not take, lacks, or cannot accept; the message names both."""


class RewardRegistrationError(ValueError):
    """Two different definitions registered under one reward name; the message names both."""


class ValueTypeError(ValueError):
    """A value that cannot be read as the type declared for it (a recipe field, a reward
    parameter, an override); the message names the key. See rewards.coercion."""
