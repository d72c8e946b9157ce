"""A pool of worker processes with a hard wall-clock limit per item.

Why not ``multiprocessing.Pool`` or ``concurrent.futures``: neither can stop one task
that is stuck inside C code (a sympy power tower, a regex on 100 KB of braces) without
losing the whole pool, and both fork or re-import ``__main__`` in ways that do not mix
with a trainer's threads. Here each worker is a plain ``python -m <module>`` child
speaking JSON lines; the parent watches the time each item takes, SIGKILLs a worker that
overruns, records the item as timed out and hands the rest of its chunk to a fresh
worker. Work comes in *chunks*: a ``head`` processed once (e.g. a gold answer) and the
``items`` that share it (the completions of one prompt), so a head is parsed once per
chunk, not once per item.

The worker side is :func:`serve`, given a ``handle_head(head) -> (state, reply)`` and a
``handle_item(state, item) -> reply``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import selectors
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

TIMED_OUT = "__timed_out__"
"""Reply recorded for a head or item whose worker overran its limit (or died on it)."""


@dataclass
class Chunk:
    head: Any
    items: list[Any]
    head_reply: Any = None
    item_replies: list[Any] = field(default_factory=list)


@dataclass
class _Job:
    chunk: Chunk
    start: int  # index in chunk.items of this job's first item
    head_done: bool = False
    done: int = 0


class _Worker:
    def __init__(self, module: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            env=env,
            start_new_session=True,
        )
        self.buffer = b""
        self.ready = False  # set by the worker's first line, once its imports are done
        self.job: _Job | None = None
        self.since = time.monotonic()  # start of the current head or item (or of the worker)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class WorkerPool:
    """``size`` workers running ``python -m module``; see the module docstring.

    An item's clock starts when a ready worker receives it (worker start-up, imports
    included, is not charged to any item); a worker that does not get ready within
    ``startup_limit_s`` or dies while starting is an error, not a timeout.
    """

    def __init__(
        self,
        module: str,
        size: int,
        item_limit_s: float,
        grace_s: float = 0.5,
        startup_limit_s: float = 120.0,
    ) -> None:
        self.module, self.size = module, max(1, size)
        self.item_limit_s, self.grace_s, self.startup_limit_s = item_limit_s, grace_s, startup_limit_s
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._env = {**os.environ, "WORKER_ITEM_LIMIT_S": str(item_limit_s)}
        self.restarts = 0
        weakref.finalize(self, _kill_all, self._workers)
        atexit.register(_kill_all, self._workers)

    def run(self, chunks: list[Chunk]) -> list[Chunk]:
        """Fill ``head_reply`` and ``item_replies`` of every chunk (TIMED_OUT where a worker overran)."""
        with self._lock:
            for c in chunks:
                c.head_reply, c.item_replies = None, [None] * len(c.items)
            queue = deque(_Job(c, 0) for c in chunks if c.items)
            if queue:
                self._drain(queue)
            return chunks

    def pids(self) -> list[int]:
        """Process ids of the live workers (tests check that none outlives the pool)."""
        return [w.proc.pid for w in self._workers]

    def close(self) -> None:
        with self._lock:
            _kill_all(self._workers)

    def _drain(self, queue: deque[_Job]) -> None:
        while len(self._workers) < min(self.size, len(queue)):
            self._workers.append(_Worker(self.module, self._env))
        with selectors.DefaultSelector() as sel:
            for w in self._workers:
                sel.register(w.proc.stdout, selectors.EVENT_READ, w)
            while queue or any(w.job for w in self._workers):
                for w in self._workers:
                    if w.ready and w.job is None and queue:
                        self._start(w, queue.popleft(), sel, queue)
                for key, _ in sel.select(timeout=max(0.0, self._next_deadline() - time.monotonic())):
                    self._read(key.data, sel, queue)
                now = time.monotonic()
                for w in list(self._workers):
                    if not w.ready and now - w.since > self.startup_limit_s:
                        raise RuntimeError(
                            f"{self.module} worker not ready after {self.startup_limit_s:.0f}s"
                        )
                    if w.job is not None and now - w.since > self.item_limit_s + self.grace_s:
                        log.warning(
                            "worker %s overran %.1fs on one item; killing it", w.proc.pid, self.item_limit_s
                        )
                        self._fail(w, sel, queue)

    def _next_deadline(self) -> float:
        deadlines = [w.since + self.item_limit_s + self.grace_s for w in self._workers if w.job is not None]
        deadlines += [w.since + self.startup_limit_s for w in self._workers if not w.ready]
        return min(deadlines, default=time.monotonic() + 1.0)

    def _start(self, w: _Worker, job: _Job, sel: selectors.BaseSelector, queue: deque) -> None:
        chunk = job.chunk
        try:
            w.send({"head": chunk.head, "items": chunk.items[job.start :]})
        except (BrokenPipeError, OSError):
            self._replace(w, sel)
            queue.appendleft(job)
            return
        w.job, w.since = job, time.monotonic()

    def _read(self, w: _Worker, sel: selectors.BaseSelector, queue: deque) -> None:
        data = os.read(w.proc.stdout.fileno(), 1 << 16)
        if not data:
            if not w.ready:
                raise RuntimeError(f"{self.module} worker exited while starting (status {w.proc.wait()})")
            log.warning("worker %s exited (status %s) in the middle of a chunk", w.proc.pid, w.proc.poll())
            self._fail(w, sel, queue)
            return
        w.buffer += data
        *lines, w.buffer = w.buffer.split(b"\n")
        for line in lines:
            reply = json.loads(line)
            job = w.job
            w.since = time.monotonic()
            if not w.ready:
                w.ready = True
                continue
            assert job is not None, "reply from an idle worker"
            if not job.head_done:
                job.head_done, job.chunk.head_reply = True, reply
            else:
                job.chunk.item_replies[job.start + job.done] = reply
                job.done += 1
            if job.start + job.done == len(job.chunk.items):
                w.job = None

    def _fail(self, w: _Worker, sel: selectors.BaseSelector, queue: deque) -> None:
        """Record the current head or item as TIMED_OUT and requeue the rest of the chunk."""
        job = w.job
        self._replace(w, sel)
        if job is None:
            return
        chunk = job.chunk
        if not job.head_done:
            chunk.head_reply = TIMED_OUT
            return
        failed = job.start + job.done
        chunk.item_replies[failed] = TIMED_OUT
        if failed + 1 < len(chunk.items):
            queue.append(_Job(chunk, failed + 1))

    def _replace(self, w: _Worker, sel: selectors.BaseSelector) -> None:
        sel.unregister(w.proc.stdout)
        w.kill()
        self.restarts += 1
        fresh = _Worker(self.module, self._env)
        self._workers[self._workers.index(w)] = fresh
        sel.register(fresh.proc.stdout, selectors.EVENT_READ, fresh)


def _kill_all(workers: list[_Worker]) -> None:
    for w in workers:
        w.kill()
    workers.clear()


def serve(handle_head: Callable[[Any], tuple[Any, Any]], handle_item: Callable[[Any, Any], Any]) -> None:
    """Worker main loop: one JSON request per stdin line, one JSON reply per head and per item.

    The worker exits when its parent does (EOF on stdin), and its stdout is kept for
    replies only: stray prints go to stderr.
    """
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        state, reply = handle_head(request["head"])
        out.write(json.dumps(reply) + "\n")
        for item in request["items"]:
            out.write(json.dumps(handle_item(state, item)) + "\n")
