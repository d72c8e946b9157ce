"""A fork server that lives inside one bwrap sandbox and runs jobs there one at a time.

Forking this running interpreter costs ~2 ms of CPU per job where a fresh bwrap and Python cost
~20 ms. Each job runs on writable places made for it (``_tmpfs.fresh_places``: a new /tmp,
/dev/shm and IPC namespace in a mount namespace of its own), strictly one after another; after
each the server SIGKILLs every other process of the pid namespace (``kill(-1)``), confirms none
is left and clears the uid's keyrings, or exits so the parent replaces the sandbox. A server whose
kernel refused it the namespaces runs one job and exits (``fresh_places`` false in its reply).

It is the namespace's init (bwrap ``--as-pid-1``), so a job cannot signal it, and non-dumpable,
so a job cannot ptrace it or write its memory; jobs run under ``_seccomp``'s filter, and the
parent checks before each reuse that its init is still this server (``servers``). Standard
library only. Frames on stdin/stdout: 4-byte big-endian length, then JSON.
What each layer isolates: docs/rewards.md ("Sandbox: what is and is not isolated").
"""

import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as harness
import _pump
import _seccomp
import _tmpfs

CONTROL_IN = 0
WRITABLE = ("/tmp", "/dev/shm")
NPROC_OVERHEAD = 1  # this server shares the job's uid and user namespace
SYSV = {"shm": "shmctl", "sem": "semctl", "msg": "msgctl"}  # /proc/sysvipc/<kind>: its remover
IPC_RMID = 0
KILL_DEADLINE_S = 5.0


def _read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_frame(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    return json.loads(_read_exact(fd, struct.unpack(">I", head)[0]))


def _write_frame(fd, payload):
    data = json.dumps(payload).encode()
    os.write(fd, struct.pack(">I", len(data)) + data)


def _clean_up():
    """Kill everything the job left and empty the writable places; False if anything is left.

    The server is the namespace's init: every process of the sandbox descends from it and
    every orphan is handed to it, so "no child left to reap" means "no process left", zombies
    included. False makes the server exit after its reply, so the parent replaces the whole
    sandbox (and its memory-backed /tmp and /dev/shm) rather than hand the next job a dirty one.
    """
    deadline = time.monotonic() + KILL_DEADLINE_S
    while True:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            break
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)  # killed, not yet exited (a big one frees its memory first)
    _seccomp.clear_user_keyrings()
    return _remove_sysv_objects() and all(_empty(place) for place in WRITABLE)


def sysv_objects():
    """``{kind: [id, ...]}`` of this IPC namespace's SysV segments, semaphores and queues."""
    found = {}
    for kind in SYSV:
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                found[kind] = [int(line.split()[1]) for line in f.readlines()[1:] if line.strip()]
        except OSError:
            found[kind] = []
    return found


def _remove_sysv_objects():
    """IPC_RMID every SysV object (a segment outlives its job and sits outside ``memory_mb``);
    True when none is left. Jobs cannot create any (``_seccomp``): this is the second line."""
    objects = sysv_objects()
    if not any(objects.values()):
        return True
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, ids in objects.items():
        for ident in ids:
            if kind == "sem":
                libc.semctl(ident, 0, IPC_RMID)
            else:
                getattr(libc, SYSV[kind])(ident, IPC_RMID, None)
    return not any(sysv_objects().values())


def _empty(place):
    """Remove everything under ``place``, first giving back the permissions a job took away
    (at any depth: a chmod 000 directory hides what is under it); True when it is empty."""
    try:
        os.chmod(place, 0o1777)
        pending = [place]
        while pending:  # every directory readable and writable again, iteratively
            directory = pending.pop()
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        os.chmod(entry.path, 0o700)
                        pending.append(entry.path)
        for name in os.listdir(place):
            path = os.path.join(place, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        return not os.listdir(place)
    except (OSError, RecursionError):
        return False


def _run(request, control_out, fresh):
    job, stdin = request["job"], base64.b64decode(request["stdin"])
    limits = job["limits"]
    job["workdir"] = "/tmp/job"
    job["nproc_overhead"] = NPROC_OVERHEAD
    places = {"/tmp": limits["tmpfs_mb"], "/dev/shm": limits["shm_mb"]}
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe()
    ready_r, ready_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(in_r, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (in_r, in_w, out_r, out_w, err_r, err_w, res_r, ready_r, control_out):
                with contextlib.suppress(OSError):
                    os.close(fd)
            if fresh:
                _tmpfs.fresh_places(places, limits["tmpfs_files"], job["workdir"])
            else:  # the first and only job of a server that cannot (``main``): its places are new
                os.makedirs(job["workdir"], exist_ok=True)
                os.chdir(job["workdir"])
            harness.run_job(job, res_w, ready_fd=ready_w)
        except BaseException as err:
            harness._say(ready_w, b"!" + f"{type(err).__name__}: {err}"[:300].encode(errors="replace"))
        finally:
            os._exit(harness.HARNESS_FAILED)
    for fd in (in_r, out_w, err_w, res_w, ready_w):
        os.close(fd)
    outputs, timed_out, capped = _pump.pump(
        stdin, in_w, [out_r, err_r, res_r], limits["wall_s"], limits["output_kb"] << 10, start
    )
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    for fd in (out_r, err_r, res_r):
        os.close(fd)
    ready = _pump.read_ready(ready_r)
    # A job that never ran its code, unless the clock stopped it first: our state is suspect.
    harness_failed = ready not in (b"r", b"u") and not timed_out
    clean = _clean_up() and not harness_failed
    reply = {
        "returncode": os.waitstatus_to_exitcode(status),
        "stdout": base64.b64encode(outputs[out_r]).decode(),
        "stderr": base64.b64encode(outputs[err_r]).decode(),
        "result": base64.b64encode(outputs[res_r]).decode(),
        "timed_out": timed_out,
        "capped": capped,
        "clean": clean,
        "harness_failed": harness_failed,
        "harness_error": ready[1:].decode(errors="replace") or f"exit {os.waitstatus_to_exitcode(status)}",
    }
    return reply, clean


def main():
    """argv: the MiB of /tmp and /dev/shm and the files each may hold (``_tmpfs``; before we
    become non-dumpable, which makes /proc/self/uid_map unwritable to us)."""
    tmp_mb, shm_mb, files = (int(arg) for arg in sys.argv[1:4])
    # Capabilities kept (in our own user namespace) to give every job fresh places; without
    # them this server runs one job and exits, and the parent stops reusing servers.
    fresh = _tmpfs.mount_capped({"/tmp": tmp_mb, "/dev/shm": shm_mb}, files, keep_capabilities=True) is True
    ctypes.CDLL(None).prctl(4, 0)  # PR_SET_DUMPABLE 0: jobs cannot ptrace or write our memory
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # init ignores what it has no handler for
    _seccomp.fresh_session_keyring()
    control_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    _clean_up()
    while True:
        request = _read_frame(CONTROL_IN)
        if request is None:
            return
        reply, clean = _run(request, control_out, fresh)
        reply["files_capped"] = reply["fresh_places"] = fresh
        _write_frame(control_out, reply)
        if not clean or not fresh:
            return  # the parent sees EOF and starts a fresh sandbox


if __name__ == "__main__":
    main()
