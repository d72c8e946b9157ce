"""Reward functions checked on every call, so a broken reward stops the run with its name.

`with_reward_checks` wraps each reward function (not reward models), keeping its name (TRL's
metric key) and its sync/async nature, and raises `RewardFailedError`, a UserError (one line,
exit 2), naming the reward, the row (index in the batch) and what it got: not a number, not
finite, or beyond MAX_REWARD_MAGNITUDE. A first rollout batch that no reward judges (all None or
NaN) stops the run at once, naming the rewards: a short run would otherwise end with loss 0 and
exit 0. Later, `max_unjudged_batches` batches in a row in which one reward judged nothing stop
the run naming that reward. What TRL does without it: docs/rewards.md.
"""

from __future__ import annotations

import asyncio
import math
import numbers
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from trl.trainer.utils import get_callable_name, is_async_callable

from gspo_trl.core.errors import RewardFailedError, UserError
from gspo_trl.training.safety.reward_calls import DEFAULT_TIME_LIMIT_S, guarded_call, restored_cwd

MAX_UNJUDGED_BATCHES = 5
"""Rollout batches in a row in which a reward returns None for every completion before the
run stops. A reward that answers None for rows outside its task (a mixture of maths and code)
still judges some rows of most batches; five all-None batches in a row is a broken input."""
MAX_REWARD_MAGNITUDE = 1e6
"""Largest |score| accepted. TRL keeps scores in float32 tensors (trl/trainer/grpo_trainer.py:
`torch.tensor(output_reward_func, dtype=torch.float32)`), where 1e308 is already inf and the
group std overflows from ~1e19; long before that one row's reward swamps every other reward's
weight. No reward scale is near 1e6: such a score is a bug in the reward."""
SHOWN_CHARS = 80


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
    value = _as_number(value)
    return value is None or (isinstance(value, float) and math.isnan(value))


class FirstRolloutBatch:
    """Whether any reward judged a completion of this process's first rollout batch.

    Each guarded reward reports its first call; once all have, a batch that none of them
    judged stops the run. Off (`names` empty) when a reward model is among the rewards: a
    model scores every completion.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.pending = set(names)
        self.names = list(names)
        self.judged = False

    def report(self, name: str, judged: bool, completions: int, prompts: Sequence[Any] | None) -> None:
        if name not in self.pending:
            return
        self.pending.discard(name)
        self.judged = self.judged or judged
        if not self.pending and not self.judged:
            first = f"; first prompt: {_short(prompts[0])}" if prompts else ""
            raise RewardFailedError(
                f"reward(s) {self.names} judged none of the {completions} completions of the first "
                "rollout batch (every score None or NaN): the data's columns are probably not in the "
                f"format they read (`gspo-trl rewards list`, docs/rewards.md){first}"
            )


class CheckedReward:
    """A reward function whose every result is checked (see the module docstring)."""

    def __init__(
        self,
        func: Callable[..., Any],
        max_unjudged_batches: int = MAX_UNJUDGED_BATCHES,
        first_batch: FirstRolloutBatch | None = None,
        time_limit_s: float | None = None,
        setting: str = "rewards[i]",
    ) -> None:
        self.func = func
        self.__name__ = get_callable_name(func)  # TRL's metric key
        self.time_limit_s = DEFAULT_TIME_LIMIT_S if time_limit_s is None else time_limit_s
        self.setting = setting  # the recipe entry a time-limit message points to
        self.max_unjudged_batches = max_unjudged_batches
        self.unjudged_batches = 0
        self.first_batch = first_batch

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
    ) -> Any:
        def call() -> Any:
            return self.func(prompts=prompts, completions=completions, **kwargs)

        try:
            result = guarded_call(self.__name__, self.time_limit_s, call, _batch(prompts), self.setting)
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
        shape = getattr(result, "shape", None)
        if shape is not None and len(shape) != 1:
            raise RewardFailedError(
                f"reward {self.__name__!r} returned an array of shape {tuple(shape)} for {len(completions)} "
                "completions; return one score per completion (a list or a 1-D array)"
            )
        scores = [_as_number(score) for score in result]
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
            if abs(value) > MAX_REWARD_MAGNITUDE:
                raise RewardFailedError(
                    f"reward {self.__name__!r} returned {score} for row {index} of the batch "
                    f"(completion {_short(completions[index])}); scores beyond +-{MAX_REWARD_MAGNITUDE:g} "
                    "are not a reward scale (TRL keeps them in float32): rescale the reward"
                )
        if self.first_batch is not None:
            judged = any(not _unjudged(_as_number(score)) for score in scores)
            self.first_batch.report(self.__name__, judged, len(scores), prompts)
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
        return f"CheckedReward({self.func!r})"


class AsyncCheckedReward(CheckedReward):
    """The same checks for an async reward function (TRL awaits it with the others)."""

    async def __call__(  # type: ignore[override]
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
    ) -> Any:
        try:
            with restored_cwd(self.__name__):
                result = await asyncio.wait_for(
                    self.func(prompts=prompts, completions=completions, **kwargs), self.time_limit_s
                )
        except UserError:
            raise
        except TimeoutError:
            raise RewardFailedError(
                f"reward {self.__name__!r} did not return within {self.time_limit_s:g} s on a batch "
                f"({_batch(prompts)}); fix the reward, or raise its limit ({self.setting}.time_limit_s)"
            ) from None
        except Exception as error:
            raise self._raised(error, prompts) from error
        return self.check(result, completions, prompts)


def _batch(prompts: Sequence[Any] | None) -> str:
    return f"{len(prompts)} completions, first prompt {_short(prompts[0])}" if prompts else "no prompts"


def with_reward_checks(
    reward_funcs: Sequence[Any],
    max_unjudged_batches: int = MAX_UNJUDGED_BATCHES,
    time_limits_s: Sequence[float | None] | None = None,
) -> list[Any]:
    """Each reward function wrapped in a CheckedReward; reward models (nn.Module) and ids as given.
    `time_limits_s`: per reward (None: DEFAULT_TIME_LIMIT_S), from the recipe's `time_limit_s`."""
    models = [
        func for func in reward_funcs if isinstance(func, str) or not callable(func) or _is_module(func)
    ]
    functions = [func for func in reward_funcs if not any(func is model for model in models)]
    first_batch = None if models else FirstRolloutBatch([get_callable_name(func) for func in functions])
    limits = list(time_limits_s) if time_limits_s is not None else [None] * len(reward_funcs)
    guarded: list[Any] = []
    for index, (func, limit) in enumerate(zip(reward_funcs, limits, strict=True)):
        checks = (max_unjudged_batches, first_batch, limit, f"rewards[{index}]")
        if any(func is model for model in models):
            guarded.append(func)
        elif is_async_callable(func):
            guarded.append(AsyncCheckedReward(func, *checks))
        else:
            guarded.append(CheckedReward(func, *checks))
    return guarded


def _is_module(func: Any) -> bool:
    from torch import nn

    return isinstance(func, nn.Module)
