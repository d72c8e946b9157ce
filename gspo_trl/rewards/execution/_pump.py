"""The one I/O loop between a sandboxed job and whoever runs it. Standard library only.

Used by the parent for a fresh sandbox (``pipes``) and by the fork server inside a reused
one (``_server``): feed the job's stdin, read its stdout, stderr and result pipe until
EOF, the output cap or the wall-clock deadline, whichever comes first.
"""

import contextlib
import os
import selectors
import time

CHUNK = 1 << 16


def pump(stdin, stdin_fd, read_fds, wall_s, cap, start):
    """Return ``({fd: bytes}, timed_out, capped)``; ``stdin_fd`` is closed, ``read_fds`` are not.

    ``start`` is the job's ``time.monotonic()`` start; ``cap`` is in bytes per stream.
    """
    outputs = {fd: bytearray() for fd in read_fds}
    pending = memoryview(stdin)
    timed_out = capped = False
    with selectors.DefaultSelector() as sel:
        for fd in read_fds:
            sel.register(fd, selectors.EVENT_READ)
        os.set_blocking(stdin_fd, False)
        if pending:
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            os.close(stdin_fd)
        open_readers = len(read_fds)
        while open_readers:
            remaining = wall_s - (time.monotonic() - start)
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=remaining):
                if key.fd == stdin_fd:
                    try:
                        pending = pending[os.write(stdin_fd, pending[:CHUNK]) :]
                    except OSError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(stdin_fd)
                        os.close(stdin_fd)
                    continue
                data = os.read(key.fd, CHUNK)
                if not data:
                    sel.unregister(key.fd)
                    open_readers -= 1
                    continue
                outputs[key.fd] += data
                if len(outputs[key.fd]) > cap:
                    del outputs[key.fd][cap:]
                    capped, open_readers = True, 0
                    break
        if pending:
            with contextlib.suppress(OSError):
                os.close(stdin_fd)
    return {fd: bytes(buf) for fd, buf in outputs.items()}, timed_out, capped


def read_ready(fd):
    """What the harness said on its ready pipe once the job is over (``_harness``: ``r`` or ``u``
    when the job's code started, ``!`` and an error when setting it up failed, b"" when it said
    nothing); never blocks, closes ``fd``."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 512)
    except OSError:
        return b""
    finally:
        os.close(fd)
