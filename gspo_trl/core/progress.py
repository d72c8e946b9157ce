"""Progress for the long commands (eval, filter, calibrate, check-logprobs, warm start).

One look: counts done / total, rate and time left, on stderr so that a command's report on
stdout stays clean. On a terminal, a tqdm bar. Elsewhere (a batch job's log file, `make demo
> demo.log`, CI's captured output) a carriage-return bar would be noise, and nothing at all
leaves a user staring at a silent log for the length of a stage: a plain line every tenth of
the way (and at the end) instead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

LINES_PER_STAGE = 10


def progress_bar(total: int | None, desc: str, unit: str = "it", **kwargs: Any) -> Any:
    """A tqdm bar on stderr when stderr is a terminal, else a `LineProgress`."""
    if not sys.stderr.isatty():
        return LineProgress(total, desc, unit, initial=kwargs.get("initial", 0))
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, **kwargs)


class LineProgress:
    """tqdm's update / set_postfix / close, printing one line per tenth of `total` done.

    A line reads ``warm-start SFT: 300/1000 step (30%), 0.15 s/step, ETA 1m45s, loss 0.412``;
    the rate counts only this process's work (not the `initial` steps a resume starts from).
    """

    def __init__(
        self, total: int | None, desc: str, unit: str, initial: int = 0, stream: TextIO | None = None
    ) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.stream = stream
        self._initial, self._start = initial, time.monotonic()
        self._next_tenth = self._tenth_after(initial)
        self._postfix = ""

    def _tenth_after(self, done: int) -> int | None:
        if not self.total:
            return None
        return min(self.total, (done * LINES_PER_STAGE // self.total + 1) * self.total // LINES_PER_STAGE)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._next_tenth is not None and self.n >= self._next_tenth:
            self._print()
            self._next_tenth = self._tenth_after(self.n) if self.n < (self.total or 0) else None

    def set_postfix(self, values: dict[str, Any] | None = None, refresh: bool = True, **more: Any) -> None:
        shown = {**(values or {}), **more}
        self._postfix = ", ".join(f"{key} {value}" for key, value in shown.items())

    def close(self) -> None:
        if self._next_tenth is not None and self.n > self._initial:  # stopped short: say where
            self._print()
        self._next_tenth = None

    def _print(self) -> None:
        done = self.n - self._initial
        seconds = time.monotonic() - self._start
        parts = [f"{self.desc}: {self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)"]
        if done > 0:
            per = seconds / done
            parts.append(f"{per:.2f} s/{self.unit}" if per >= 0.01 else f"{done / seconds:.0f} {self.unit}/s")
            if self.total and self.n < self.total:
                parts.append(f"ETA {duration(per * (self.total - self.n))}")
        if self._postfix:
            parts.append(self._postfix)
        print(", ".join(parts), file=self.stream or sys.stderr, flush=True)


def duration(seconds: float) -> str:
    """'42s', '3m05s', '2h07m': short enough for a step or progress line."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def vllm_progress(desc: str) -> Callable[..., Any] | bool:
    """What to pass as vLLM's `use_tqdm`: False off a terminal, else a maker of its bars.

    Off a terminal it must be False, not a disabled bar: vLLM divides by the bar's elapsed
    time, which a disabled bar keeps at 0. vLLM calls the maker two ways: over an iterable
    while it queues requests (kept quiet: it takes no time worth showing), and with `total=`
    for the samples it generates (vLLM counts each of a prompt's n samples as a request);
    that bar keeps vLLM's counts and postfix, with our name.
    """
    if not sys.stderr.isatty():
        return False

    def make(*args: Any, **kwargs: Any) -> Any:
        if args:  # vllm.utils.tqdm_utils.maybe_tqdm(iterable, ...): adding requests
            return args[0]
        kwargs.pop("desc", None)
        kwargs.pop("dynamic_ncols", None)
        return progress_bar(kwargs.pop("total", None), desc, unit="sample", **kwargs)

    return make
