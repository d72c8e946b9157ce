"""Writable places with a cap on files, not only bytes. Runs inside the sandbox; standard library only.

A tmpfs's ``size=`` counts file contents, not inodes, so a job could flood its /tmp with empty
files and hard links; ``nr_inodes=`` bounds both. :func:`mount_capped` makes a user and mount
namespace of our own, maps our uid and gid to themselves, mounts a fresh tmpfs with ``size=`` and
``nr_inodes=`` over each place, then drops every capability, so a job cannot mount an uncapped
one. The mounts die with the namespace's last process. Why, measured, and the man pages this
rests on: docs/rewards.md ("Sandbox: what is and is not isolated").
"""

import ctypes
import os

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC = 0x00020000, 0x10000000, 0x40000000, 0x08000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 0x4000, 1 << 18
_CAPABILITY_VERSION_3 = 0x20080522


def mount_capped(places, inodes, extra_namespaces=0, keep_capabilities=False):
    """Mount ``{path: size_mb}`` as capped tmpfs (``inodes`` files each) in namespaces of our own,
    also unsharing ``extra_namespaces`` (clone flags), and chdir to the first place. True when
    every place is capped; False when a mount failed; None when the kernel refused the new
    namespaces (then nothing changed). ``keep_capabilities``: the fork server's, which needs them
    to give each job fresh places (:func:`fresh_places`) and runs no untrusted code itself."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | extra_namespaces) != 0:
        return None
    try:
        maps = {"setgroups": "deny", "uid_map": f"{uid} {uid} 1", "gid_map": f"{gid} {gid} 1"}
        for name, text in maps.items():
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError:
        return _drop_capabilities(libc) and False
    mounted = True
    for place, size_mb in places.items():
        options = f"size={size_mb << 20},nr_inodes={inodes},mode=1777".encode()
        if libc.mount(b"tmpfs", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
            mounted = False
    os.chdir(next(iter(places)))  # the old cwd is the directory now hidden under the mount
    return (keep_capabilities or _drop_capabilities(libc)) and mounted


def fresh_places(places, inodes, workdir):
    """A forked job's own writable places: new mount and IPC namespaces (of the server's user
    namespace, where it holds the capabilities), a new capped tmpfs over each of ``{path:
    size_mb}``, ``workdir`` made in the first and entered, then every capability dropped.

    Why: whatever a job leaves in them (files, default ACLs, ``user.*`` xattrs, permissions,
    SysV objects, POSIX message queues) dies with its namespaces, and the next job starts on
    new ones: a reused server no longer depends on a list of what a job could have changed.
    Raises OSError when any step fails (the job then never runs: a sandbox fault)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS | CLONE_NEWIPC) for a job's own places")
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:  # nothing leaks back to the server
        raise OSError(ctypes.get_errno(), "making the job's mounts private")
    for place, size_mb in places.items():
        options = f"size={size_mb << 20},nr_inodes={inodes},mode=1777".encode()
        if libc.mount(b"tmpfs", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
            raise OSError(ctypes.get_errno(), f"mounting a fresh tmpfs on {place}")
    os.mkdir(workdir, 0o700)
    os.chdir(workdir)
    _drop_capabilities(libc)


def _drop_capabilities(libc):
    """Empty effective, permitted and inheritable sets (for good: they cannot be raised again)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]

    empty = (Data * 2)()
    if libc.capset(ctypes.byref(Header(_CAPABILITY_VERSION_3, 0)), empty) != 0:
        raise OSError(ctypes.get_errno(), "capset: cannot drop the namespace's capabilities")
    return True
