"""One reward call, bounded: a time limit, the working directory put back, and Ctrl-C obeyed.

TRL calls each reward function from the training loop and waits for it; a reward that never
returns (a network call without a timeout, a dead lock, an endless loop) held training until
a second Ctrl-C, since the first only asks for a checkpoint at the end of the step
(gspo_trl.training.safety.interrupt), and that step never ends. `guarded_call` runs the reward
in the main thread, as before, with:

- a time limit (SIGALRM via `setitimer`): past it the reward is interrupted and the run stops
  with a RewardFailedError naming the reward, the batch (its first prompt) and the limit, and
  how to raise it (`rewards[i].time_limit_s`). A limit cannot interrupt C code that never
  returns to Python, and a reward that sets its own SIGALRM (math-verify's `timeout`) replaces
  this one for its call;
- Ctrl-C or SIGTERM during the call: the run's own handler hears it (StopOnInterrupt: save at
  the end of this step), and the reward gets INTERRUPT_GRACE_S more; one that has not returned
  by then is interrupted and training stops (TrainingInterrupted: exit 130, the last checkpoint
  kept): one signal, not two. A rollout batch's rewards come before its first update, so the
  step given up has trained nothing;
- the working directory restored: a reward that calls os.chdir moved every relative path of
  the run (output_dir, data files) for the rest of it; it is put back, with one warning
  naming the reward.

Outside the main thread (an async reward on TRL's event loop) only the working directory is
guarded here; the async wrapper bounds the time with `asyncio.wait_for`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from gspo_trl.core.errors import RewardFailedError
from gspo_trl.training.safety.interrupt import HANDLED_SIGNALS, TrainingInterrupted

logger = logging.getLogger(__name__)

INTERRUPT_GRACE_S = 10.0
"""After Ctrl-C/SIGTERM, how long a running reward may still take before it is interrupted: a
third of the 30 s that torch's launcher and Slurm (KillWait) leave a rank after the signal, the
rest being for the step's update and checkpoint."""
DEFAULT_TIME_LIMIT_S = 600.0
"""Longest one reward call may take by default: a call scores a whole rollout batch (hundreds
of completions); the code reward runs each in a sandbox with its own 3-10 s wall limit, in
parallel, and a model-graded reward waits on a server. Ten minutes is far beyond an honest
call and short of a night lost to a hung one; set `time_limit_s` on the reward to change it."""


class _TimeUp(BaseException):
    """Raised into the reward by the alarm (a BaseException: `except Exception` in a reward
    must not swallow it)."""


class _Interrupted(BaseException):
    """Raised into the reward by Ctrl-C / SIGTERM during its call."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def guarded_call(
    name: str, time_limit_s: float, call: Callable[[], Any], batch: str, where: str = "rewards[i]"
) -> Any:
    """`call()` under the time limit, the signal guard and the directory guard (module docstring)."""
    with restored_cwd(name):
        if threading.current_thread() is not threading.main_thread():
            return call()
        try:
            with _bounded(time_limit_s):
                return call()
        except _TimeUp:
            raise RewardFailedError(
                f"reward {name!r} did not return within {time_limit_s:g} s on a batch ({batch}); "
                f"fix the reward, or raise its limit ({where}.time_limit_s)"
            ) from None
        except _Interrupted as interrupted:
            signum = interrupted.signum
            what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            logger.warning(
                "%s during reward %r, which did not return within %g s: stopped without finishing this step",
                what,
                name,
                INTERRUPT_GRACE_S,
            )
            raise TrainingInterrupted(None) from None


@contextlib.contextmanager
def _bounded(seconds: float) -> Iterator[None]:
    """SIGALRM after `seconds`; a SIGINT/SIGTERM meanwhile is passed to the handler that was
    there (StopOnInterrupt: save at the step's end) and cuts what is left to INTERRUPT_GRACE_S."""
    interrupted: list[int] = []

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Interrupted(interrupted[0]) if interrupted else _TimeUp

    def on_signal(signum: int, frame: Any) -> None:
        handler = previous[signum]
        if handler in (signal.SIG_DFL, None):
            raise _Interrupted(signum)  # what the signal would have done: stop now
        if callable(handler):
            handler(signum, frame)  # StopOnInterrupt: flag, and the next signal acts at once
        interrupted.append(signum)
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        if not left or left > INTERRUPT_GRACE_S:
            signal.setitimer(signal.ITIMER_REAL, INTERRUPT_GRACE_S)

    previous_alarm = signal.signal(signal.SIGALRM, on_alarm)
    outer = signal.setitimer(signal.ITIMER_REAL, seconds)[0]
    previous = {handled: signal.signal(handled, on_signal) for handled in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for handled, handler in previous.items():
            if signal.getsignal(handled) is on_signal:  # not replaced meanwhile (StopOnInterrupt's re-arm)
                signal.signal(handled, handler)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_alarm)
        if outer:  # someone else's timer was running: give it back
            signal.setitimer(signal.ITIMER_REAL, outer)


@contextlib.contextmanager
def restored_cwd(name: str) -> Iterator[None]:
    """Put the working directory back after the call, warning once it was changed."""
    before = os.getcwd()
    try:
        yield
    finally:
        try:
            after: str | None = os.getcwd()
        except OSError:  # changed into a folder since deleted
            after = None
        if after != before:
            os.chdir(before)
            logger.warning(
                "reward %r changed the working directory (os.chdir); put back to %s after each call: "
                "relative paths of the run depend on it",
                name,
                before,
            )
