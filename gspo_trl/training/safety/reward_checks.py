"""Reward functions checked on every call, so a broken reward stops the run with its name.

TRL calls each reward once per rollout batch and turns what comes back into a tensor: a
reward that raises ends the run with a traceback deep in TRL; one that returns strings or
the wrong number of values fails there with a message that names no row; and one that
returns None for every completion (it reads a column the data does not hold in its format)
trains on nothing but the other rewards, with a warning per batch that is easy to miss.

`guard_rewards` wraps each reward function (not reward models): the wrapper keeps the
reward's name (TRL's metric key) and sync/async nature, and raises `RewardFailedError`, a
UserError (one line, exit 2), naming the reward, the row (index in the batch) and what it
got; after `max_unjudged_batches` batches in a row in which a reward judged nothing, the run
stops naming that reward.
"""

from __future__ import annotations

import math
import numbers
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from trl.trainer.utils import get_callable_name, is_async_callable

from gspo_trl.errors import UserError

MAX_UNJUDGED_BATCHES = 5
"""Rollout batches in a row in which a reward returns None for every completion before the
run stops. A reward that answers None for rows outside its task (a mixture of maths and code)
still judges some rows of most batches; five all-None batches in a row is a broken input."""
SHOWN_CHARS = 80


class RewardFailedError(UserError):
    """A reward function raised or returned something that is not one score per completion."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _as_number(score: Any) -> Any:
    """A one-element numpy/torch value as a Python number; anything else as given."""
    if hasattr(score, "item"):
        try:
            return score.item()
        except (ValueError, RuntimeError):
            return score
    return score


def _unjudged(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class GuardedReward:
    """A reward function whose every result is checked (see the module docstring)."""

    def __init__(self, func: Callable[..., Any], max_unjudged_batches: int = MAX_UNJUDGED_BATCHES) -> None:
        self.func = func
        self.__name__ = get_callable_name(func)  # TRL's metric key
        self.max_unjudged_batches = max_unjudged_batches
        self.unjudged_batches = 0

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
    ) -> Any:
        try:
            result = self.func(prompts=prompts, completions=completions, **kwargs)
        except UserError:
            raise
        except Exception as error:
            raise self._raised(error, prompts) from error
        return self.check(result, completions, prompts)

    def _raised(self, error: Exception, prompts: Sequence[Any] | None) -> RewardFailedError:
        frames = traceback.extract_tb(error.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        first = f" (first prompt of the batch: {_short(prompts[0])})" if prompts else ""
        return RewardFailedError(
            f"reward {self.__name__!r} raised {type(error).__name__}: {error}{where}{first}"
        )

    def check(self, result: Any, completions: Sequence[Any], prompts: Sequence[Any] | None) -> list[Any]:
        """`result` as a list of scores; raises RewardFailedError naming the first bad one."""
        if isinstance(result, str | bytes | dict) or not hasattr(result, "__len__"):
            raise RewardFailedError(
                f"reward {self.__name__!r} returned {_short(result)}, not a list of scores "
                "(one per completion)"
            )
        scores = list(result)
        if len(scores) != len(completions):
            raise RewardFailedError(
                f"reward {self.__name__!r} returned {len(scores)} scores for {len(completions)} completions "
                "(one float or None per completion)"
            )
        for index, score in enumerate(scores):
            if score is None:
                continue
            value = _as_number(score)
            if not isinstance(value, numbers.Real):
                raise RewardFailedError(
                    f"reward {self.__name__!r} returned {_short(score)} for row {index} of the batch "
                    f"(completion {_short(completions[index])}); scores must be numbers or None"
                )
            if math.isinf(value):
                raise RewardFailedError(
                    f"reward {self.__name__!r} returned {score} for row {index} of the batch "
                    f"(completion {_short(completions[index])}); scores must be finite"
                )
        self._count_unjudged(scores, prompts)
        return scores

    def _count_unjudged(self, scores: list[Any], prompts: Sequence[Any] | None) -> None:
        if scores and all(_unjudged(score) for score in scores):
            self.unjudged_batches += 1
        else:
            self.unjudged_batches = 0
        if self.unjudged_batches >= self.max_unjudged_batches:
            first = f"; first prompt of the last batch: {_short(prompts[0])}" if prompts else ""
            raise RewardFailedError(
                f"reward {self.__name__!r} judged no completion (all None) in {self.unjudged_batches} "
                "rollout batches in a row: the data's columns are probably not in the format it reads "
                f"(`gspo-trl rewards list`, docs/rewards.md){first}"
            )

    def __repr__(self) -> str:
        return f"GuardedReward({self.func!r})"


class AsyncGuardedReward(GuardedReward):
    """The same checks for an async reward function (TRL awaits it with the others)."""

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
    ) -> Any:
        try:
            result = await self.func(prompts=prompts, completions=completions, **kwargs)
        except UserError:
            raise
        except Exception as error:
            raise self._raised(error, prompts) from error
        return self.check(result, completions, prompts)


def guard_rewards(reward_funcs: Sequence[Any], max_unjudged_batches: int = MAX_UNJUDGED_BATCHES) -> list[Any]:
    """Each reward function wrapped in a GuardedReward; reward models (nn.Module) and ids as given."""
    guarded: list[Any] = []
    for func in reward_funcs:
        if isinstance(func, str) or not callable(func) or _is_module(func):
            guarded.append(func)
        elif is_async_callable(func):
            guarded.append(AsyncGuardedReward(func, max_unjudged_batches))
        else:
            guarded.append(GuardedReward(func, max_unjudged_batches))
    return guarded


def _is_module(func: Any) -> bool:
    from torch import nn

    return isinstance(func, nn.Module)
