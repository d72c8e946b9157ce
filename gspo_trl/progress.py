"""Progress bars for the long commands (eval, filter, calibrate, check-logprobs, warm start).

One look: counts done / total, rate and time left, on stderr so that a command's report on
stdout stays clean. `disable=None` is tqdm's "only on a terminal": a batch job's log file or
CI's captured output gets no carriage-return noise, only the command's own lines.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def progress_bar(total: int | None, desc: str, unit: str = "it", **kwargs: Any) -> Any:
    """A tqdm bar on stderr, shown only when stderr is a terminal."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=None, dynamic_ncols=True, **kwargs)


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
