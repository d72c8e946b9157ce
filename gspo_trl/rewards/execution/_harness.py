"""Runs inside the sandbox, before and around the untrusted code. Standard library only.

Started as ``python -I -S _harness.py CONFIG_FD RESULT_FD READY_FD``. It reads its job from
CONFIG_FD (nothing about the tests sits on disk), lowers its resource limits (hard limits), in
the rlimit mode mounts a new /tmp and /dev/shm and leaves the network behind where the kernel
allows, then runs the job: ``stdio`` (execs the solution; the parent compares its stdout),
``call`` (calls ``fn_name``, module-level or a ``Solution`` method, and writes the return value
as JSON) or ``check`` (runs the row's ``check(fn)`` in a copy of the solution's namespace with
pristine builtins and writes ``<nonce> <json verdict>`` to RESULT_FD). No record means failure;
``SystemExit`` and printed "success" text are failures too.

READY_FD gets ``r`` (``u``: its places could not be capped in files, see ``_tmpfs``) once the job
is set up and its solution file reads back as written, just before its code runs; ``!`` and the
error when setting it up failed (exit status ``HARNESS_FAILED``): a fault of the sandbox, which
retires a reused one, never a silent 0. What the verdict rests on: docs/rewards.md ("code").
"""

import builtins
import contextlib
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _seccomp
import _tmpfs

_PRISTINE_BUILTINS = dict(vars(builtins))
_PLAIN = (int, float, complex, str, bytes, bool, type(None))
_CONTAINERS = (list, tuple, set, frozenset, dict)
HARNESS_FAILED = 111


def _set_limits(limits, nproc_overhead):
    """``memory_mb`` bounds the job as a whole: at most ``processes`` tasks, each process
    ``memory_mb // processes`` of address space. RLIMIT_NPROC counts the tasks of this uid in
    this user namespace, which also holds ``nproc_overhead`` of ours (bwrap's init, the server)."""
    per_process = (limits["memory_mb"] // limits["processes"]) << 20
    pairs = {
        resource.RLIMIT_CPU: (limits["cpu_s"], limits["cpu_s"] + 1),
        resource.RLIMIT_AS: (per_process,) * 2,
        resource.RLIMIT_FSIZE: (limits["file_mb"] << 20,) * 2,
        resource.RLIMIT_NOFILE: (limits["open_files"],) * 2,
        resource.RLIMIT_NPROC: (limits["processes"] + nproc_overhead,) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    for which, (soft, hard) in pairs.items():
        resource.setrlimit(which, (soft, hard))


def _leave_network():
    """New user, network (no interfaces but a down loopback) and IPC namespaces (SysV objects
    then die with the job's last process); False where refused."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        clone_newuser, clone_newnet, clone_newipc = 0x10000000, 0x40000000, 0x08000000
        return libc.unshare(clone_newuser | clone_newnet | clone_newipc) == 0
    except (OSError, AttributeError):
        return False


def _plain(value, depth=0):
    """True for values built only from built-in types: no object can fake ``==``."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind in _CONTAINERS and depth < 20:
        items = value.items() if kind is dict else value
        if kind is dict:
            return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in items)
        return all(_plain(v, depth + 1) for v in items)
    return False


def _guarded(candidate):
    def call(*args, **kwargs):
        result = candidate(*args, **kwargs)
        if not _plain(result):
            raise TypeError(f"candidate returned {type(result).__name__}, not a plain built-in value")
        return result

    return call


def _run_check(job):
    solution_globals = {"__name__": "solution", "__builtins__": dict(_PRISTINE_BUILTINS)}
    exec(compile(job["solution"], "solution.py", "exec"), solution_globals)
    test_globals = dict(solution_globals)
    test_globals["__builtins__"] = dict(_PRISTINE_BUILTINS)
    test_globals["__name__"] = "tests"
    entry_point = job["entry_point"]
    if entry_point not in solution_globals:
        raise NameError(f"the solution does not define {entry_point!r}")
    test_globals[entry_point] = _guarded(solution_globals[entry_point])
    exec(compile(job["tests"], "tests.py", "exec"), test_globals)
    check = test_globals.get("check")
    if not callable(check):
        raise NameError("the test code does not define check(candidate)")
    check(test_globals[entry_point])


def _solution_function(namespace, name):
    if callable(namespace.get(name)):
        return namespace[name]
    holder = namespace.get("Solution")
    if isinstance(holder, type) and callable(getattr(holder, name, None)):
        return getattr(holder(), name)
    raise NameError(f"the solution defines neither {name!r} nor Solution.{name}")


def _as_json(value, depth=0):
    """The return value as JSON data (tuples read as lists); TypeError for anything else."""
    kind = type(value)
    if kind in (int, float, str, bool, type(None)):
        return value
    if kind in (list, tuple) and depth < 50:
        return [_as_json(v, depth + 1) for v in value]
    if kind is dict and depth < 50 and all(type(k) is str for k in value):
        return {k: _as_json(v, depth + 1) for k, v in value.items()}
    raise TypeError(f"the function returned {kind.__name__}, not JSON data")


def _run_call(job):
    namespace = {"__name__": "solution", "__builtins__": dict(_PRISTINE_BUILTINS)}
    exec(compile(job["solution"], "solution.py", "exec"), namespace)
    fn = _solution_function(namespace, job["fn_name"])
    return _as_json(fn(*job["args"]))


def run_job(job, result_fd, network_left=True, ready_fd=None, files_capped=True):
    """Lower the limits, take a fresh session keyring, install the seccomp filter, say ready on
    ``ready_fd``, then run the job; never returns (execs or ``os._exit``s)."""
    try:
        _set_limits(job["limits"], job.get("nproc_overhead", 0))
        _seccomp.fresh_session_keyring()
        _seccomp.install()
        solution = _written(job["workdir"] + "/solution.py", job["solution"])
        if job["kind"] == "stdio":
            if not network_left:  # the parent logs it; nothing of the job has run yet
                os.write(result_fd, f"{job['nonce']} {json.dumps({'network_isolated': False})}\n".encode())
            os.close(result_fd)
    except BaseException as err:
        _say(ready_fd, b"!" + f"{type(err).__name__}: {err}"[:300].encode(errors="replace"))
        os._exit(HARNESS_FAILED)
    _say(ready_fd, b"r" if files_capped else b"u")
    if job["kind"] == "stdio":
        os.execv(sys.executable, [sys.executable, "-I", "-S", solution])
    nonce = job.pop("nonce")
    os.set_inheritable(result_fd, False)
    verdict = {"passed": False, "error": "", "network_isolated": network_left}
    try:
        if job["kind"] == "call":
            verdict["value"] = _run_call(job)
        else:
            _run_check(job)
        verdict["passed"] = True
    except BaseException as err:  # SystemExit and KeyboardInterrupt are failures too
        verdict["error"] = f"{type(err).__name__}: {err}"[:500]
    with contextlib.suppress(BaseException):  # a closed or hijacked stdout must not cost the verdict
        sys.stdout.flush()
    try:
        record = json.dumps(verdict)
    except (TypeError, ValueError) as err:  # e.g. an int too long to print
        record = json.dumps({"passed": False, "error": f"{type(err).__name__}: {err}"[:500]})
    os.write(result_fd, f"{nonce} {record}\n".encode())
    os._exit(0)


def _written(path, text):
    """Write the solution where the job runs and read it back as the job will: a place a job
    could poison (a default ACL ``u::-wx`` made files unreadable by their owner) fails here,
    before "ready", as a sandbox fault, instead of the interpreter failing and scoring 0."""
    data = text.encode(errors="surrogateescape")
    with open(path, "wb") as f:
        f.write(data)
    with open(path, "rb") as f:
        if f.read() != data:
            raise OSError(f"{path} does not read back as written")
    return path


def _say(ready_fd, message):
    if ready_fd is not None:
        with contextlib.suppress(OSError):
            os.write(ready_fd, message)
        os.close(ready_fd)


def main():
    config_fd, result_fd, ready_fd = (int(arg) for arg in sys.argv[1:4])
    with contextlib.suppress(OSError, AttributeError):  # die with the parent (rlimit mode)
        import ctypes

        ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    with os.fdopen(config_fd, "rb") as config_file:
        job = json.loads(config_file.read())
    network_left = True
    files_cap = job["limits"]["tmpfs_files"]
    if job["mode"] == "rlimit":  # new capped /tmp (the cwd) and /dev/shm of the job's own namespaces
        extra = _tmpfs.CLONE_NEWNET | _tmpfs.CLONE_NEWIPC
        places = {"/tmp": job["limits"]["tmpfs_mb"], "/dev/shm": job["limits"]["shm_mb"]}
        capped = _tmpfs.mount_capped(places, files_cap, extra)
        if capped is True:  # the private directory is hidden under the new /tmp
            job["workdir"] = os.environ["HOME"] = "/tmp"
        else:  # refused: the private directory on disk, the host's /tmp and /dev/shm
            network_left = _leave_network() if capped is None else True
            os.chdir(job["workdir"])
    else:  # a fresh bwrap sandbox: cap its /tmp and /dev/shm as a server does
        places = {"/tmp": job["limits"]["tmpfs_mb"], "/dev/shm": job["limits"]["shm_mb"]}
        capped = _tmpfs.mount_capped(places, files_cap)
    run_job(job, result_fd, network_left, ready_fd, files_capped=capped is True)


if __name__ == "__main__":
    main()
