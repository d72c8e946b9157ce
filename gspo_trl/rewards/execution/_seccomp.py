"""The system calls a sandboxed job may not make, as a seccomp filter. Standard library only.

Runs inside the sandbox (imported by ``_harness`` and ``_server``). The harness installs the
filter on the job itself, after its rlimits and before any untrusted code, so it holds in
both modes and across ``fork``/``execve``; the fork server stays unfiltered. What it denies
(EPERM, or ENOSYS for ``clone3`` so that libc falls back to ``clone``), and why: the
docstrings of ``DENIED`` and ``OWN_PROCESS_ONLY``.

The parent also checks the server's limits, priority, policy and affinity before reusing it
(``servers``): the filter is the first line, the check the second.

Any other architecture's calling convention (i386 through ``int 0x80``, x32) kills the
process. Machines other than x86_64 and aarch64 get no filter (:func:`available`).
"""

import ctypes
import errno
import os
import struct

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name -> (x86_64, aarch64) syscall numbers, from the kernel's unistd tables
_NR = {
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "memfd_create": (319, 279),
    "memfd_secret": (447, 447),
    "shmget": (29, 194),
    "shmat": (30, 196),
    "semget": (64, 190),
    "msgget": (68, 186),
    "unshare": (272, 97),
    "setns": (308, 268),
    "clone": (56, 220),
    "clone3": (435, 435),
    "process_madvise": (440, 440),
    "pidfd_getfd": (438, 438),
    "kcmp": (312, 272),
    "perf_event_open": (298, 241),
    "prlimit64": (302, 261),
    "sched_setscheduler": (144, 119),
    "sched_setparam": (142, 118),
    "sched_setattr": (314, 274),
    "sched_setaffinity": (203, 122),
    "migrate_pages": (256, 238),
    "move_pages": (279, 239),
    "setpriority": (141, 140),
    "ioprio_set": (251, 30),
    "kill": (62, 129),
    "setxattr": (188, 5),
    "lsetxattr": (189, 6),
    "fsetxattr": (190, 7),
    "removexattr": (197, 14),
    "lremovexattr": (198, 15),
    "fremovexattr": (199, 16),
    "setxattrat": (463, 463),
    "removexattrat": (466, 466),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "mq_open": (240, 180),
    "mq_unlink": (241, 181),
}
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "add_key",
    "request_key",
    "keyctl",
    "memfd_create",
    "memfd_secret",
    "shmget",
    "shmat",
    "semget",
    "msgget",
    "unshare",
    "setns",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    "perf_event_open",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "setxattrat",
    "removexattrat",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "mq_open",
    "mq_unlink",
)
"""Denied outright (EPERM, or ENOSYS for ``clone3``):

* ``ptrace``, ``process_vm_readv``/``writev``: no job reads or writes another process;
* ``add_key``, ``request_key``, ``keyctl``: the kernel keyrings outlive a job (a channel
  from one job to the next);
* ``memfd_create``, ``memfd_secret``: memory-backed files outside every tmpfs size cap;
* ``shmget``, ``shmat``, ``semget``, ``msgget``: SysV IPC objects outlive their job and
  sit outside ``memory_mb``;
* ``unshare``, ``setns``, ``clone`` with a new-namespace flag: a job's own user namespace
  would let it mount an uncapped tmpfs or hide processes in a nested pid namespace;
* the ``setxattr`` and ``removexattr`` family (``setxattrat`` too): a default POSIX ACL
  ``u::-wx`` on a shared /tmp made every later job's solution unreadable, a ``user.*`` xattr
  carries data to the next job (each job's places are new anyway, ``_tmpfs.fresh_places``);
  ``shutil.copy2`` ignores the EPERM;
* ``io_uring_setup``/``enter``/``register``: io_uring's own operations (``IORING_OP_SETXATTR``,
  opens, sockets) are not system calls this filter sees;
* ``mq_open``, ``mq_unlink``: POSIX message queues live in the IPC namespace, a channel
  between the jobs of one server (each job also gets an IPC namespace of its own).
"""

# Allowed only when their first argument (a pid) is 0, the caller itself.
OWN_PROCESS_ONLY = (
    "prlimit64",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
    "sched_setaffinity",
    "migrate_pages",
    "move_pages",
)
"""So that nothing a job does to another process outlives the job, every call that sets
a property of a process other than the caller. prlimit(2): a process may change another's
limits when its real uid matches the target's real, effective and saved uids (and likewise
for gids), and in a reused sandbox the fork server shares the job's uid; setpriority(2) and
sched_setscheduler(2) likewise let a process renice or reschedule any process of its own
uid. A job that lowered the server's RLIMIT_FSIZE to 1 byte made every later job of that
server fail before it ran (the server passes its limits on to every fork); ``SCHED_IDLE`` or
nice 19 on the server made later jobs time out under a cpu cgroup. So (``OWN_PROCESS_ONLY``):

* ``prlimit64``, ``sched_setscheduler``, ``sched_setparam``, ``sched_setattr``,
  ``sched_setaffinity``, ``migrate_pages``, ``move_pages``: only with pid 0 (the caller);
  ``setrlimit``, ``nice()``, ``os.sched_setaffinity(0, ...)`` keep working;
* ``setpriority`` and ``ioprio_set``: only with who 0 and never for a whole uid
  (``PRIO_USER``, ``IOPRIO_WHO_USER``: the server is of that uid);
* ``kill`` with pid -1 (every process the caller may signal: in the rlimit mode as an
  ordinary user, the trainer too);
* ``process_madvise``, ``pidfd_getfd``, ``kcmp``, ``perf_event_open``: no job needs to look
  into or act on another process's memory, files or counters.
"""

# (which, who): allowed only with who 0 and ``which`` not a whole uid.
PRIO_USER, IOPRIO_WHO_USER = 2, 3

WHOLE_UID = {"setpriority": PRIO_USER, "ioprio_set": IOPRIO_WHO_USER}
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
NEW_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
X32_SYSCALL_BIT = 0x40000000

_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0, _OFFSET_ARG1 = 0, 4, 16, 24  # low words (little-endian)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def machine():
    return os.uname().machine  # not ``platform``: its import costs each fresh sandbox milliseconds


def available():
    return machine() in _AUDIT_ARCH


def number(name):
    """This machine's number of syscall ``name`` (None on a machine we have no table for)."""
    if not available():
        return None
    return _NR[name][0 if machine() == "x86_64" else 1]


def program():
    """The classic-BPF program as bytes (struct sock_filter[]) for this machine.

    A pid argument is compared on its low 32 bits: the kernel reads it as a 32-bit ``pid_t``.
    """
    arch = machine()
    # (code, jump-true label, jump-false label, k), or a bare label name marking the next one
    body = [(_LD_ABS_W, None, None, _OFFSET_ARCH), (_JEQ, "next", "kill", _AUDIT_ARCH[arch])]
    body.append((_LD_ABS_W, None, None, _OFFSET_NR))
    if arch == "x86_64":
        body.append((_JGE, "kill", "next", X32_SYSCALL_BIT))
    body += [(_JEQ, "deny", "next", number(name)) for name in DENIED]
    body += [(_JEQ, "own_pid", "next", number(name)) for name in OWN_PROCESS_ONLY]
    body += [(_JEQ, f"whole_uid_{name}", "next", number(name)) for name in WHOLE_UID]
    body.append((_JEQ, "kill_all", "next", number("kill")))
    body.append((_JEQ, "enosys", "next", number("clone3")))
    body.append((_JEQ, "next", "allow", number("clone")))
    body += [(_LD_ABS_W, None, None, _OFFSET_ARG0), (_JSET, "deny", "allow", NEW_NAMESPACE_FLAGS)]
    body += ["own_pid", (_LD_ABS_W, None, None, _OFFSET_ARG0), (_JEQ, "allow", "deny", 0)]
    for name, whole_uid in WHOLE_UID.items():
        body += [f"whole_uid_{name}", (_LD_ABS_W, None, None, _OFFSET_ARG0)]
        body += [(_JEQ, "deny", "next", whole_uid), (_LD_ABS_W, None, None, _OFFSET_ARG1)]
        body.append((_JEQ, "allow", "deny", 0))
    body += ["kill_all", (_LD_ABS_W, None, None, _OFFSET_ARG0), (_JEQ, "deny", "allow", 0xFFFFFFFF)]
    ends = {
        "allow": _ALLOW,
        "deny": _ERRNO | errno.EPERM,
        "enosys": _ERRNO | errno.ENOSYS,
        "kill": _KILL_PROCESS,
    }
    code, labels = [], {}
    for item in body:
        if isinstance(item, str):
            labels[item] = len(code)
        else:
            code.append(item)
    labels.update({name: len(code) + i for i, name in enumerate(ends)})
    out = b""
    for index, (op, true, false, k) in enumerate(code):
        jumps = [0 if t in (None, "next") else labels[t] - index - 1 for t in (true, false)]
        assert all(0 <= j < 256 for j in jumps), "a BPF jump is 8 bits"
        out += struct.pack("HBBI", op, jumps[0], jumps[1], k)
    for value in ends.values():
        out += struct.pack("HBBI", _RET, 0, 0, value)
    return out


def install():
    """Install the filter on this process (inherited by its children); False where impossible."""
    if not available():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    code = program()
    filters = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(code) // 8, ctypes.addressof(filters))
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) == 0


def keyctl(operation, *args):
    """The raw ``keyctl`` syscall (no libkeyutils in the standard library); -1 where absent."""
    nr = number("keyctl")
    if nr is None:
        return -1
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(*[ctypes.c_long(a) for a in (nr, operation, *args)])


KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR = 1, 7
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5


def fresh_session_keyring():
    """Join a new, empty, anonymous session keyring (the one inherited may be the trainer's)."""
    return keyctl(KEYCTL_JOIN_SESSION_KEYRING, 0) >= 0


def clear_user_keyrings():
    """Empty the uid's user and user-session keyrings (shared by every job of a sandbox)."""
    for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
        keyctl(KEYCTL_CLEAR, ring)
