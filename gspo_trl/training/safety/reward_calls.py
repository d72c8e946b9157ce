"""One reward call, bounded: a time limit it cannot swallow, the working directory put back,
and Ctrl-C obeyed.

TRL calls each reward from the training loop and waits; a reward that never returns, or one whose
bare `except:` swallows the alarm and Ctrl-C, would hold training. `guarded_call` runs the reward
in the main thread with a time limit (SIGALRM via `setitimer`, re-fired every REARM_S until the
call returns: RewardFailedError naming the reward, the batch and the limit; HARD_STOP_S later,
stopped without its cooperation, exit 2); with Ctrl-C or SIGTERM heard by the run's handler and
obeyed INTERRUPT_GRACE_S later (exit 130; a second Ctrl-C ends the run at once); and with the
working directory restored, with a warning naming the reward.

Outside the main thread (an async reward on TRL's event loop) only the working directory is
guarded here; the async wrapper bounds the time with `asyncio.wait_for`. A reward must not catch
BaseException: docs/rewards.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
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
MAX_TIME_LIMIT_S = 1e9
"""Longest limit taken (about 31 years): `setitimer` overflows near 9.2e9 s (Python's
nanosecond clock) and `threading`'s waits at TIMEOUT_MAX; a longer one is refused, naming it."""
REARM_S = 0.5
"""Past the limit, how often the alarm fires again until the call returns: a reward that
catches the first one (a bare `except:` in a retry loop) gets the next."""
HARD_STOP_S = 5.0
"""Past the limit (or the Ctrl-C grace), how long a reward that keeps swallowing the alarm may
run before the process ends without its cooperation (os._exit from a watchdog thread)."""


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
    if not 0 < time_limit_s <= MAX_TIME_LIMIT_S:  # NaN too
        raise RewardFailedError(
            f"reward {name!r}: time limit {time_limit_s:g} s is beyond what the timer takes; "
            f"set {where}.time_limit_s to a number of seconds in (0, {MAX_TIME_LIMIT_S:g}]"
        )
    with restored_cwd(name):
        if threading.current_thread() is not threading.main_thread():
            return call()
        guard = _Guard(name, time_limit_s)
        try:
            guard.arm()
            return call()
        except _TimeUp:
            raise RewardFailedError(
                f"reward {name!r} did not return within {time_limit_s:g} s on a batch ({batch}); "
                f"fix the reward, or raise its limit ({where}.time_limit_s)"
            ) from None
        except _Interrupted as interrupted:
            logger.warning(
                "%s during reward %r, which did not return within %g s: stopped without finishing this step",
                _signal_name(interrupted.signum),
                name,
                INTERRUPT_GRACE_S,
            )
            raise TrainingInterrupted(None) from None
        finally:
            guard.done = True  # first, and no call before it: the handlers do nothing from here
            guard.disarm()


_UNSET = object()


class _Guard:
    """The alarm, the SIGINT/SIGTERM handlers and the watchdog of one reward call.

    Disarming is atomic in effect: `done` is set before anything else (a plain attribute store,
    where Python runs no signal handler), after which the handlers only record; so a limit
    reached while the call returns can no longer leave them installed (10 of 400 calls ending
    within 2 ms of the limit did, when the alarm interrupted the restoring itself).
    """

    def __init__(self, name: str, time_limit_s: float) -> None:
        self.name, self.limit = name, time_limit_s
        self.done = False
        self.interrupted: int | None = None
        self.late: list[int] = []  # signals that arrived while disarming: passed on after
        self.hard_stop_at = time.monotonic() + time_limit_s + HARD_STOP_S
        self.finished = threading.Event()
        self.previous: dict[int, Any] = {}  # each filled in before our handler goes in
        self.previous_alarm: Any = _UNSET
        self.outer = 0.0

    def arm(self) -> None:
        """The watchdog, then the handlers, the timer last: whatever fires meanwhile finds what
        it needs, and `disarm` puts back exactly what was replaced."""
        threading.Thread(target=self.watch, name=f"reward-watchdog-{self.name}", daemon=True).start()
        for handled in HANDLED_SIGNALS:
            self.previous[handled] = signal.getsignal(handled)
            signal.signal(handled, self.on_signal)
        self.previous_alarm = signal.getsignal(signal.SIGALRM)
        signal.signal(signal.SIGALRM, self.on_alarm)
        self.outer = signal.setitimer(signal.ITIMER_REAL, self.limit, REARM_S)[0]

    def on_alarm(self, signum: int, frame: Any) -> None:
        if self.done:
            return
        raise _Interrupted(self.interrupted) if self.interrupted else _TimeUp

    def on_signal(self, signum: int, frame: Any) -> None:
        if self.done:
            self.late.append(signum)
            return
        if self.interrupted is not None:  # the second one: end the run now
            self.stop_now(f"{_signal_name(signum)} again during reward {self.name!r}: the run ends now", 130)
        self.interrupted = signum
        handler = self.previous.get(signum, signal.SIG_DFL)
        self.hard_stop_at = time.monotonic() + INTERRUPT_GRACE_S + HARD_STOP_S
        if handler in (signal.SIG_DFL, None):
            self.hard_stop_at = time.monotonic() + HARD_STOP_S
            raise _Interrupted(signum)  # what the signal would have done: stop now
        if callable(handler):
            handler(signum, frame)  # StopOnInterrupt: flag (and it puts back its own previous ones)
        for handled in HANDLED_SIGNALS:  # stay the handler: the next signal must reach us
            now = signal.getsignal(handled)
            if now != self.on_signal:
                self.previous[handled] = now  # what to put back once the call is over
                signal.signal(handled, self.on_signal)
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        if not left or left > INTERRUPT_GRACE_S:
            signal.setitimer(signal.ITIMER_REAL, INTERRUPT_GRACE_S, REARM_S)

    def watch(self) -> None:
        """Ends the process if the call outlives its hard stop (the alarm can be swallowed, or
        never run: a reward in C code that does not return to Python)."""
        while not self.finished.wait(max(0.0, min(self.hard_stop_at - time.monotonic(), 1.0))):
            if time.monotonic() >= self.hard_stop_at and not self.done:
                if self.interrupted is not None:
                    self.stop_now(
                        f"{_signal_name(self.interrupted)} during reward {self.name!r}, which swallowed the "
                        "interrupt (it catches BaseException): the run ends now",
                        130,
                    )
                self.stop_now(
                    f"reward {self.name!r} ignored its time limit of {self.limit:g} s for {HARD_STOP_S:g} s "
                    "more (it catches BaseException, e.g. a bare `except:`, or is stuck in C code): the run "
                    "ends now; fix the reward (it must not catch BaseException)",
                    2,
                )

    def stop_now(self, message: str, status: int) -> None:
        """One line, then exit without the reward's cooperation; checkpoints on disk stay."""
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            os.write(2, f"error: {message}; checkpoints already saved are kept\n".encode())
        os._exit(status)

    def disarm(self) -> None:
        self.finished.set()
        if self.previous_alarm is not _UNSET:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for handled, handler in self.previous.items():
            if signal.getsignal(handled) == self.on_signal:  # not replaced meanwhile
                signal.signal(handled, handler)
        if self.previous_alarm is not _UNSET:
            signal.signal(signal.SIGALRM, self.previous_alarm)  # runs a pending handler first: ours
        if self.outer:  # someone else's timer was running: give it back
            signal.setitimer(signal.ITIMER_REAL, self.outer)
        for signum in self.late:  # to the handler the run has now
            signal.raise_signal(signum)


def _signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


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
