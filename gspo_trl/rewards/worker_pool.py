"""A pool of worker processes with a hard wall-clock limit per item.

Each worker is a plain ``python -m <module>`` child speaking JSON lines; the parent watches the
time each request takes, SIGKILLs a worker that overruns, records the item as timed out and
starts a replacement (why not ``multiprocessing.Pool``: docs/rewards.md, "math").

Work comes in *chunks*: a ``head`` (e.g. a gold answer) and the ``items`` that share it. A worker
processes a chunk's head once, then its items one by one (two requests queued); an idle worker
prefers a chunk nobody works on, and only then helps with a chunk with 2+ items to go, so a head
is processed at most once per worker and one slow item cannot hold back its chunk.
The worker side is :func:`serve`, given ``handle_head(head) -> (state, reply)`` and
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

STEAL_MIN_ITEMS = 2
MAX_QUEUED_BYTES = 16_384
PIPELINE_DEPTH = 2  # requests queued per worker, so it never waits for the parent to be scheduled
TIMED_OUT = "__timed_out__"
"""Reply recorded for a head or item whose worker overran its limit (or died on it)."""


@dataclass
class Chunk:
    head: Any
    items: list[Any]
    head_reply: Any = None  # the first reply for the head (or TIMED_OUT)
    head_replies: list[Any] = field(default_factory=list)  # every processing of the head
    item_replies: list[Any] = field(default_factory=list)
    todo: deque[int] = field(default_factory=deque)


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
        self.chunk: Chunk | None = None  # whose head this worker holds once its queue is done
        # requests sent and not answered yet, in order: (chunk, item index, or None for the head)
        self.tasks: deque[tuple[Chunk, int | None]] = deque()
        self.since = time.monotonic()  # start of the current request (or of the worker)

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

    A request's clock starts when a ready worker receives it (worker start-up, imports
    included, is charged to no item); a worker that does not get ready within
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
        """Fill the replies of every chunk (TIMED_OUT where a worker overran or died)."""
        with self._lock:
            for c in chunks:
                c.head_reply, c.head_replies = None, []
                c.item_replies, c.todo = [None] * len(c.items), deque(range(len(c.items)))
            if any(c.items for c in chunks):
                self._drain([c for c in chunks if c.items])
            return chunks

    def start(self) -> None:
        """Start every worker now (a training run calls this once, before its first batch)."""
        with self._lock:
            while len(self._workers) < self.size:
                self._workers.append(_Worker(self.module, self._env))
            self._drain([])

    def pids(self) -> list[int]:
        """Process ids of the live workers (tests check that none outlives the pool)."""
        return [w.proc.pid for w in self._workers]

    def close(self) -> None:
        with self._lock:
            _kill_all(self._workers)

    def _drain(self, chunks: list[Chunk]) -> None:
        while len(self._workers) < min(self.size, sum(len(c.items) for c in chunks)):
            self._workers.append(_Worker(self.module, self._env))
        with selectors.DefaultSelector() as sel:
            for w in self._workers:
                sel.register(w.proc.stdout, selectors.EVENT_READ, w)
            while any(c.todo for c in chunks) or any(w.tasks for w in self._workers) or not chunks:
                for w in self._workers:
                    while w.ready and len(w.tasks) < PIPELINE_DEPTH and self._assign(w, chunks, sel):
                        pass
                if not chunks and all(w.ready for w in self._workers):
                    return
                for key, _ in sel.select(timeout=max(0.0, self._next_deadline() - time.monotonic())):
                    self._read(key.data, sel)
                now = time.monotonic()
                for w in list(self._workers):
                    if not w.ready and now - w.since > self.startup_limit_s:
                        raise RuntimeError(
                            f"{self.module} worker not ready after {self.startup_limit_s:.0f}s"
                        )
                    if w.tasks and now - w.since > self.item_limit_s + self.grace_s:
                        log.warning(
                            "worker %s overran %.1fs on one item; killing it", w.proc.pid, self.item_limit_s
                        )
                        self._fail(w, sel)

    def _next_deadline(self) -> float:
        deadlines = [w.since + self.item_limit_s + self.grace_s for w in self._workers if w.tasks]
        deadlines += [w.since + self.startup_limit_s for w in self._workers if not w.ready]
        return min(deadlines, default=time.monotonic() + 1.0)

    def _assign(self, w: _Worker, chunks: list[Chunk], sel: selectors.BaseSelector) -> bool:
        """Queue one more request on ``w``; False when there is nothing for it to do."""
        if w.chunk is not None and w.chunk.todo and w.chunk.head_reply != TIMED_OUT:
            if w.tasks and _too_big_to_queue(w.chunk.items[w.chunk.todo[0]]):
                return False
            chunk, index = w.chunk, w.chunk.todo.popleft()
            return self._send(w, {"item": chunk.items[index]}, (chunk, index), sel)
        if w.tasks:
            return False  # a new chunk starts only on an idle worker: its head may be slow
        held = {id(other.chunk) for other in self._workers if other is not w}
        unowned = [c for c in chunks if c.todo and id(c) not in held]
        # Helping with a chunk another worker holds costs one more head; worth it for a long tail only.
        shared = [c for c in chunks if len(c.todo) >= STEAL_MIN_ITEMS]
        if not unowned and not shared:
            return False
        chunk = max(unowned or shared, key=lambda c: len(c.todo))
        w.chunk = chunk  # claimed now, so no other idle worker picks the same chunk meanwhile
        return self._send(w, {"head": chunk.head}, (chunk, None), sel)

    def _send(
        self, w: _Worker, message: dict[str, Any], task: tuple[Chunk, int | None], sel: selectors.BaseSelector
    ) -> bool:
        try:
            w.send(message)
        except OSError:
            self._requeue([*w.tasks, task])
            w.tasks.clear()
            self._replace(w, sel)
            return False
        if not w.tasks:
            w.since = time.monotonic()  # the clock runs for the oldest unanswered request only
        w.tasks.append(task)
        return True

    def _read(self, w: _Worker, sel: selectors.BaseSelector) -> None:
        data = os.read(w.proc.stdout.fileno(), 1 << 16)
        if not data:
            if not w.ready:
                raise RuntimeError(f"{self.module} worker exited while starting (status {w.proc.wait()})")
            log.warning("worker %s exited (status %s) in the middle of a request", w.proc.pid, w.proc.poll())
            self._fail(w, sel)
            return
        w.buffer += data
        *lines, w.buffer = w.buffer.split(b"\n")
        for line in lines:
            reply = json.loads(line)
            w.since = time.monotonic()
            if not w.ready:
                w.ready = True
                continue
            assert w.tasks, "reply from an idle worker"
            chunk, index = w.tasks.popleft()
            if index is None:
                chunk.head_replies.append(reply)
                if chunk.head_reply is None:
                    chunk.head_reply = reply
            else:
                chunk.item_replies[index] = reply

    @staticmethod
    def _requeue(tasks: list[tuple[Chunk, int | None]]) -> None:
        for chunk, index in reversed(tasks):
            if index is not None and chunk.head_reply != TIMED_OUT:
                chunk.todo.appendleft(index)

    def _fail(self, w: _Worker, sel: selectors.BaseSelector) -> None:
        """The oldest request is TIMED_OUT (a head: its whole chunk); requeue the rest, replace ``w``."""
        tasks = list(w.tasks)
        w.tasks.clear()
        self._replace(w, sel)
        if not tasks:
            return
        (chunk, index), rest = tasks[0], tasks[1:]
        if index is None:
            chunk.head_reply = TIMED_OUT
            chunk.todo.clear()
        else:
            chunk.item_replies[index] = TIMED_OUT
        self._requeue(rest)

    def _replace(self, w: _Worker, sel: selectors.BaseSelector) -> None:
        sel.unregister(w.proc.stdout)
        w.kill()
        self.restarts += 1
        fresh = _Worker(self.module, self._env)
        self._workers[self._workers.index(w)] = fresh
        sel.register(fresh.proc.stdout, selectors.EVENT_READ, fresh)


def _too_big_to_queue(item: Any) -> bool:
    """A request that may not fit in the pipe buffer is sent to idle workers only: writing it
    to a busy one would block this loop, and with it every other worker, until that one reads."""
    return len(json.dumps(item)) > MAX_QUEUED_BYTES


def _kill_all(workers: list[_Worker]) -> None:
    for w in workers:
        w.kill()
    workers.clear()


def serve(handle_head: Callable[[Any], tuple[Any, Any]], handle_item: Callable[[Any, Any], Any]) -> None:
    """Worker main loop: one JSON request per stdin line (``head`` or ``item``), one reply each.

    The worker exits when its parent does (EOF on stdin), and its stdout is kept for
    replies only: stray prints go to stderr.
    """
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps({"ready": True}) + "\n")
    state = None
    for line in sys.stdin:
        request = json.loads(line)
        if "head" in request:
            state, reply = handle_head(request["head"])
        else:
            reply = handle_item(state, request["item"])
        out.write(json.dumps(reply) + "\n")
