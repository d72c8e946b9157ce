"""Wrappers around the building of TRL's colocated vLLM engine, registered here, run by GSPOTrainer.

TRL builds its engine in `GRPOTrainer.__init__` with fixed `LLM(...)` keyword arguments; the CPU
shim (gspo_trl.model.vllm_cpu.shim) and engine routing (gspo_trl.model.routing.engine) each need
to bind that `LLM` for the build. They register an `EngineBuildWrapper` here; GSPOTrainer
(gspo_trl.training.trainer, the one module that names TRL's private methods) runs the registered
wrappers around TRL's build. The last registered is outermost, as successive patches were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

EngineBuildWrapper = Callable[[Any, Callable[[], None]], None]
"""`wrapper(vllm_generation, build)`: must call `build()` once (TRL's own engine construction)."""

_WRAPPERS: list[EngineBuildWrapper] = []


def wrap_engine_build(wrapper: EngineBuildWrapper) -> None:
    """Run `wrapper` around every later engine build; registering it again changes nothing."""
    if wrapper not in _WRAPPERS:
        _WRAPPERS.append(wrapper)


@contextlib.contextmanager
def wrapping_engine_build(wrapper: EngineBuildWrapper) -> Iterator[None]:
    """`wrapper` around the engine builds within the block only."""
    _WRAPPERS.append(wrapper)
    try:
        yield
    finally:
        _WRAPPERS.remove(wrapper)


def build_engine(vllm_generation: Any, build: Callable[[], None]) -> None:
    """TRL's `build()` inside every registered wrapper, the last registered outermost."""
    call = build
    for wrapper in _WRAPPERS:
        call = partial(wrapper, vllm_generation, call)
    call()
