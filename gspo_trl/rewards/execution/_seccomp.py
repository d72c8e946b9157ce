"""The system calls a sandboxed job may not make, as a seccomp filter. Standard library only.

Runs inside the sandbox (imported by ``_harness`` and ``_server``). The harness installs the
filter on the job itself, after its rlimits and before any untrusted code, so it holds in
both modes and across ``fork``/``execve``; the fork server stays unfiltered. What it denies
(EPERM, or ENOSYS for ``clone3`` so that libc falls back to ``clone``), and why:

* ``ptrace``, ``process_vm_readv``/``writev``: no job reads or writes another process;
* ``add_key``, ``request_key``, ``keyctl``: the kernel keyrings outlive a job (a channel
  from one job to the next);
* ``memfd_create``, ``memfd_secret``: memory-backed files outside every tmpfs size cap;
* ``shmget``, ``shmat``, ``semget``, ``msgget``: SysV IPC objects outlive their job and
  sit outside ``memory_mb``;
* ``unshare``, ``setns``, ``clone`` with a new-namespace flag: a job's own user namespace
  would let it mount an uncapped tmpfs or hide processes in a nested pid namespace.

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
)
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
NEW_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
X32_SYSCALL_BIT = 0x40000000

_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16
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
    """The classic-BPF program as bytes (struct sock_filter[]) for this machine."""
    arch = machine()
    # (code, jump-true target, jump-false target, k); targets are labels resolved below
    body = [(_LD_ABS_W, None, None, _OFFSET_ARCH), (_JEQ, "next", "kill", _AUDIT_ARCH[arch])]
    body.append((_LD_ABS_W, None, None, _OFFSET_NR))
    if arch == "x86_64":
        body.append((_JGE, "kill", "next", X32_SYSCALL_BIT))
    body += [(_JEQ, "deny", "next", number(name)) for name in DENIED]
    body.append((_JEQ, "enosys", "next", number("clone3")))
    body.append((_JEQ, "next", "allow", number("clone")))
    body += [(_LD_ABS_W, None, None, _OFFSET_ARG0), (_JSET, "deny", "allow", NEW_NAMESPACE_FLAGS)]
    ends = {
        "allow": _ALLOW,
        "deny": _ERRNO | errno.EPERM,
        "enosys": _ERRNO | errno.ENOSYS,
        "kill": _KILL_PROCESS,
    }
    labels = {name: len(body) + i for i, name in enumerate(ends)}
    out = b""
    for index, (code, true, false, k) in enumerate(body):
        jumps = [0 if t in (None, "next") else labels[t] - index - 1 for t in (true, false)]
        out += struct.pack("HBBI", code, jumps[0], jumps[1], k)
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
