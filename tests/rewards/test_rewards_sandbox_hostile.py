"""Hostile programs, run for real in both sandbox modes.

Every case must score 0 (or its honest score), return within its wall-clock limit plus a
small margin, leave no process behind, and leave this (calling) process alive. Limits are
small so the battery is safe for the machine: 256 MiB of address space, 16 MiB per file,
64 processes, 2 s of wall clock.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from gspo_trl import rewards
from gspo_trl.rewards.execution import sandbox
from gspo_trl.rewards.execution.identity import MARKER
from tests._paths import ROOT
from tests._scripts import load_script

WALL_S = 2.0
MARGIN_S = 2.0
MODES = ["bwrap", "rlimit"]


@pytest.fixture(params=MODES)
def mode(request):
    if request.param == "bwrap" and not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    return request.param


def code_reward(mode: str):
    return rewards.get("code", timeout=WALL_S, memory_mb=256, sandbox=mode)


def fenced(program: str) -> str:
    return f"```python\n{program}\n```"


def leftovers() -> list[int]:
    """Live processes started by this test process's sandboxes (other sessions may run their own).

    Every sandboxed process carries the run marker, whose value starts with our pid; the
    sandbox uids are not a reliable filter here because other test processes use them too.
    """
    needle = f"{MARKER}={os.getpid()}-".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if needle in f.read():
                        pids.append(int(entry.name))
            except OSError:
                continue
    return pids


STDIO_ECHO = [{"input": "3\n", "output": "9\n"}]

# name, program, tests, entry_point, expected score
STDIO_CASES = [
    ("infinite loop", "while True:\n    pass", STDIO_ECHO, 0.0),
    ("sleep past the wall clock", "import time\ntime.sleep(60)\nprint(9)", STDIO_ECHO, 0.0),
    (
        "fork bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        STDIO_ECHO,
        0.0,
    ),
    ("memory bomb", "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))", STDIO_ECHO, 0.0),
    (
        "disk fill",
        "with open('fill.bin', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))",
        STDIO_ECHO,
        0.0,
    ),
    (
        "1 GB of stdout",
        "import sys\nchunk = 'x' * 65536\nfor _ in range(16384):\n    sys.stdout.write(chunk)",
        STDIO_ECHO,
        0.0,
    ),
    ("exit before output", "import sys\nsys.exit(0)\nprint(9)", STDIO_ECHO, 0.0),
    ("os._exit before output", "import os\nos._exit(0)", STDIO_ECHO, 0.0),
    ("right output, then crash", "print(9)\nraise SystemExit(3)", STDIO_ECHO, 0.0),
    ("honest solution", "n = int(input())\nprint(n * n)", STDIO_ECHO, 1.0),
    ("half right", "n = int(input())\nprint(9)", [*STDIO_ECHO, {"input": "2\n", "output": "4\n"}], 0.5),
]

CHECK_TESTS = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n"
CHECK_CASES = [
    ("honest function", "def square(x):\n    return x * x", 1.0),
    ("wrong function", "def square(x):\n    return x + 2", 0.0),
    ("sys.exit(0) before the tests", "import sys\ndef square(x):\n    return 0\nsys.exit(0)", 0.0),
    ("os._exit(0) before the tests", "import os\ndef square(x):\n    return 0\nos._exit(0)", 0.0),
    ("exit inside the function", "def square(x):\n    raise SystemExit(0)", 0.0),
    (
        "fake success markers",
        "def square(x):\n    return 0\nprint('passed')\nprint('All tests passed')\n"
        "print('{\"passed\": true}')",
        0.0,
    ),
    ("redefine check", "def square(x):\n    return 0\ndef check(candidate):\n    pass", 0.0),
    (
        "patch builtins so asserts pass",
        "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
        "builtins.check = lambda c: None\n__builtins__['len'] = lambda x: 0\ndef square(x):\n    return 0",
        0.0,
    ),
    (
        "object equal to everything",
        "class Anything:\n    def __eq__(self, other):\n        return True\n"
        "def square(x):\n    return Anything()",
        0.0,
    ),
    (
        "fake the result pipe",
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'0 {\"passed\": true}\\n')\n"
        "    except OSError:\n        pass\ndef square(x):\n    return 0",
        0.0,
    ),
    (
        "atexit hook that exits 0",
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef square(x):\n    return 0",
        0.0,
    ),
]


def _run_and_check(mode, completion, tests, entry_point, expected):
    start = time.monotonic()
    scores = code_reward(mode)([fenced(completion)], tests=[tests], entry_point=[entry_point])
    elapsed = time.monotonic() - start
    assert scores == [expected]
    n_runs = len(tests) if isinstance(tests, list) else 1
    assert elapsed < n_runs * WALL_S + MARGIN_S
    assert census(mode) == 0  # the next job in the same (reused) sandbox sees nothing of this one
    sandbox.shutdown()
    assert leftovers() == [], describe(leftovers())


def describe(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()[:9]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
            out.append(f"{pid}: {cmd!r} {status}")
        except OSError as err:
            out.append(f"{pid}: {err}")
    return "\n".join(out)


CENSUS = (
    "import os\nme = os.getpid()\n"
    "print(sum(1 for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me, os.getppid())))"
)


def census(mode: str) -> int:
    """Processes a fresh job can see besides itself, its parent and the namespace's init (bwrap)."""
    if mode != "bwrap":
        return 0  # no pid namespace to look into; leftovers() checks the whole machine instead
    result = sandbox.run(
        {"kind": "stdio", "solution": CENSUS}, limits=sandbox.Limits(wall_s=WALL_S), mode=mode
    )
    return int(result.stdout)


@pytest.mark.parametrize(
    ("name", "program", "tests", "expected"), STDIO_CASES, ids=[c[0] for c in STDIO_CASES]
)
def test_hostile_stdio_program(mode, name, program, tests, expected):
    _run_and_check(mode, program, tests, None, expected)


@pytest.mark.parametrize(("name", "program", "expected"), CHECK_CASES, ids=[c[0] for c in CHECK_CASES])
def test_hostile_check_program(mode, name, program, expected):
    _run_and_check(mode, program, CHECK_TESTS, "square", expected)


def test_no_network_even_to_localhost(mode):
    """A listener on 127.0.0.1 in the calling process must see no connection."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        program = (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\n"
            "    print('connected')\nexcept OSError:\n    print('blocked')"
        )
        result = sandbox.run(
            {"kind": "stdio", "solution": program}, limits=sandbox.Limits(wall_s=WALL_S), mode=mode
        )
        assert result.stdout.strip() == b"blocked"
        with pytest.raises(BlockingIOError):
            server.accept()
    assert code_reward(mode)([fenced(program)], tests=[[{"input": "", "output": "blocked"}]]) == [1.0]


def test_cannot_kill_the_caller(mode):
    caller = os.getpid()
    program = (
        f"import os, signal\ntry:\n    os.kill({caller}, signal.SIGKILL)\n    print('killed')\n"
        "except OSError:\n    print('denied')"
    )
    result = sandbox.run(
        {"kind": "stdio", "solution": program}, limits=sandbox.Limits(wall_s=WALL_S), mode=mode
    )
    assert result.stdout.strip() == b"denied"
    assert os.getpid() == caller


# bwrap: the parent is the server, the namespace's init, which the kernel keeps from the
# job's SIGKILL (the job goes on and prints); rlimit: the trainer, another uid (EPERM, a crash)
KILL_PARENT_SCORE = {"bwrap": 1.0, "rlimit": 0.0}


def test_killing_its_parent_costs_nothing_but_the_job(mode):
    """The job's parent is the sandbox server or the trainer: killing it changes nothing else."""
    program = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(9)"
    fn = code_reward(mode)
    assert fn([fenced(program)], tests=[STDIO_ECHO]) == [KILL_PARENT_SCORE[mode]]
    assert fn([fenced("print(int(input()) ** 2)")], tests=[STDIO_ECHO]) == [1.0]
    sandbox.shutdown()
    assert leftovers() == []


def test_environment_is_scrubbed(mode, monkeypatch):
    secrets = {
        "HF_TOKEN": "hf_secret",
        "WANDB_API_KEY": "wandb_secret",
        "AWS_SECRET_ACCESS_KEY": "aws_secret",
    }
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    program = "import os\nprint(sorted(os.environ))\nprint(open('/proc/self/environ', 'rb').read())"
    result = sandbox.run(
        {"kind": "stdio", "solution": program}, limits=sandbox.Limits(wall_s=WALL_S), mode=mode
    )
    assert result.returncode == 0
    for key, value in secrets.items():
        assert key.encode() not in result.stdout and value.encode() not in result.stdout
    ppid_env = "import os\nprint(open(f'/proc/{os.getppid()}/environ', 'rb').read())"
    parent = sandbox.run(
        {"kind": "stdio", "solution": ppid_env}, limits=sandbox.Limits(wall_s=WALL_S), mode=mode
    )
    assert b"hf_secret" not in parent.stdout


def test_cannot_delete_files_outside_its_temp_dir(mode, tmp_path: Path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    program = (
        "import os, shutil\n"
        f"for action in (lambda: os.remove({str(victim)!r}), lambda: shutil.rmtree({str(tmp_path)!r})):\n"
        "    try:\n        action()\n    except OSError:\n        pass\n"
        "open('mine.txt', 'w').write('ok')\nos.remove('mine.txt')\nprint(9)"
    )
    assert code_reward(mode)([fenced(program)], tests=[STDIO_ECHO]) == [1.0]  # own files are fine
    assert victim.read_text() == "keep me"


def test_temp_dirs_are_removed(mode):
    import tempfile

    base = Path(tempfile.gettempdir())
    before = {p.name for p in base.glob("gspo-sandbox-*")}
    program = "open('junk.bin', 'wb').write(b'x' * 1000)\nprint(9)"
    assert code_reward(mode)([fenced(program)] * 3, tests=[STDIO_ECHO] * 3) == [1.0] * 3
    deadline = time.monotonic() + 30  # the rlimit mode's directories go on a background thread
    while not {p.name for p in base.glob("gspo-sandbox-*")} <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {p.name for p in base.glob("gspo-sandbox-*")} <= before


def _run(mode: str, program: str, **limits) -> sandbox.RunResult:
    return sandbox.run(
        {"kind": "stdio", "solution": program}, limits=sandbox.Limits(wall_s=WALL_S, **limits), mode=mode
    )


FILL = (
    "import os\nplace = {place!r}\nn = 0\ntry:\n"
    "    with open(os.path.join(place, 'fill'), 'wb') as f:\n"
    "        for _ in range(512):\n            f.write(b'x' * (1 << 20)); f.flush(); n += 1\n"
    "except OSError:\n    pass\nprint(n)"
)


def test_writable_places_are_bounded_in_bwrap():
    """/dev/shm is capped like /tmp; bwrap's root and /dev (tmpfs, half of RAM) are read-only."""
    if not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    shm = _run("bwrap", FILL.format(place="/dev/shm"), shm_mb=8)
    assert int(shm.stdout) <= 8
    probe = (
        "for p in ('/x', '/dev/x', '/opt/x'):\n    try:\n        open(p, 'w'); print(p)\n"
        "    except OSError:\n        pass"
    )
    assert _run("bwrap", probe).stdout == b""


MESSES = {
    "chmod 000 subdirectory in /dev/shm": (
        "import os\nos.makedirs('/dev/shm/a/b')\nopen('/dev/shm/a/b/big', 'wb').write(b'x' * (4 << 20))\n"
        "os.chmod('/dev/shm/a/b', 0)\nos.chmod('/dev/shm/a', 0)\nprint(9)"
    ),
    "fill /tmp, then chmod 000": (
        "import os\nos.makedirs('/tmp/d/e')\ntry:\n    f = open('/tmp/d/e/fill', 'wb')\n"
        "    while True:\n        f.write(b'x' * (1 << 20)); f.flush()\nexcept OSError:\n    pass\n"
        "os.chmod('/tmp/d/e', 0)\nos.chmod('/tmp/d', 0)\nos.chmod('/tmp', 0)\nprint(9)"
    ),
}
EMPTY = "import os\nprint(sorted(os.listdir('/tmp')) + sorted(os.listdir('/dev/shm')))"


@pytest.mark.parametrize("mess", list(MESSES), ids=list(MESSES))
def test_a_mess_is_gone_before_the_next_job(mess):
    """A reused server wipes every level of /tmp and /dev/shm (or is replaced): honest jobs pass."""
    if not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    fn = code_reward("bwrap")
    assert fn([fenced(MESSES[mess])], tests=[STDIO_ECHO]) == [1.0]
    assert _run("bwrap", EMPTY).stdout.strip() in (b"['job']", b"[]")
    assert fn([fenced("print(int(input()) ** 2)")], tests=[STDIO_ECHO]) == [1.0]
    sandbox.shutdown()
    assert leftovers() == []


MEMORY_SPLIT = (
    "import os\nr, w = os.pipe()\nkids = 0\nfor _ in range(6):\n    try:\n"
    "        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        try:\n"
    "            b = bytearray(380 << 20)\n"
    "            os.write(w, b'1')\n        finally:\n            os._exit(0)\n    kids += 1\n"
    "for _ in range(kids):\n    os.wait()\nos.close(w)\nmine = 0\ntry:\n"
    "    b = bytearray(380 << 20); mine = 1\n"
    "except MemoryError:\n    pass\nprint((len(os.read(r, 64)) + mine) * 380)"
)


def test_memory_limit_holds_for_the_job_as_a_whole(mode):
    """6 x 380 MiB reached 2.1 GB under memory_mb 512 when the limit was per process."""
    result = _run(mode, MEMORY_SPLIT, memory_mb=512)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) <= 512


def test_a_completion_has_a_total_time_budget(mode):
    """10 stdio tests that all time out cost the completion's budget, not 10 x the limit."""
    tests = [{"input": f"{i}\n", "output": "0\n"} for i in range(10)]
    for scoring, budget in (("fraction", 3 * 1.0), ("binary", 1.0)):
        fn = rewards.get("code", timeout=1.0, scoring=scoring, sandbox=mode)
        start = time.monotonic()
        assert fn([fenced("while True:\n    pass")], tests=[tests]) == [0.0]
        assert time.monotonic() - start < budget + MARGIN_S


def test_stale_sandbox_dirs_are_removed(tmp_path):
    import subprocess
    import tempfile

    from gspo_trl.rewards.execution import jail

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    stale = Path(tempfile.mkdtemp(prefix=f"gspo-sandbox-{int(dead.stdout)}-"))
    (stale / "locked").mkdir()
    (stale / "locked" / "f").write_text("x")
    (stale / "locked").chmod(0)
    live = Path(jail.private_dir(""))
    jail.remove_stale_dirs()
    assert not stale.exists() and live.exists()
    live.rmdir()


def test_servers_die_with_a_killed_trainer():
    """SIGKILL the process that owns a sandbox server mid-job: nothing of it survives."""
    if not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    import signal
    import subprocess

    script = (
        "import sys, threading\nfrom gspo_trl.rewards.execution import sandbox\n"
        "sandbox.run({'kind': 'stdio', 'solution': 'print(1)'})\n"
        "job = {'kind': 'stdio', 'solution': 'import time; time.sleep(60)'}\n"
        "limits = sandbox.Limits(wall_s=60)\n"
        "threading.Thread(target=sandbox.run, args=(job,), kwargs={'limits': limits}).start()\n"
        "print('ready', flush=True)\n"
        "threading.Event().wait()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=os.environ)
    assert child.stdout.readline().strip() == b"ready"
    time.sleep(0.5)  # the sleeping job has started
    child.send_signal(signal.SIGKILL)
    child.wait()
    needle = f"{MARKER}={child.pid}-".encode()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _marked(needle):
        time.sleep(0.1)
    assert not _marked(needle)


def _marked(needle: bytes) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if needle in Path(f"/proc/{entry.name}/environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


BATTERY = load_script("sandbox_battery")


@pytest.mark.parametrize("case", BATTERY.CASES, ids=[c.name for c in BATTERY.CASES])
def test_hostile_battery_row(mode, case):
    """One row of ``scripts/sandbox_battery.py``'s table (issue 21, items 1-4): the attack gets
    nothing, leaves no process, SysV segment or memory behind, and 8 honest jobs after it score
    right in the same reused sandbox (the pid-1 takeover zeroed every one of them before)."""
    row = BATTERY.run_case(case, mode)
    assert row.contained, BATTERY.table([row])
    assert row.same_sandbox is not False, "the sandbox had to be replaced: " + BATTERY.table([row])
    sandbox.shutdown()
    assert leftovers() == [], describe(leftovers())


def test_rlimit_jobs_get_their_own_ipc_namespace():
    """SysV objects of an rlimit job die with it: its IPC namespace is not the host's."""
    result = _run("rlimit", "import os\nprint(os.readlink('/proc/self/ns/ipc'))")
    assert result.stdout.strip() and result.stdout.strip().decode() != os.readlink("/proc/self/ns/ipc")


def test_a_reused_sandbox_whose_init_changed_is_retired():
    """The parent's outside check: a server that became dumpable, or whose init has a child
    after clean-up, is not handed another job."""
    if not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    import signal

    from gspo_trl.rewards.execution import servers

    assert _run("bwrap", "print(1)").stdout == b"1\n"
    (server,) = [s for group in servers._idle.values() for s in group]
    assert server.tampered() is None
    os.kill(server.init.pid, signal.SIGSTOP)  # from outside the kernel delivers it
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and server.tampered() is None:
        time.sleep(0.01)
    assert "stopped" in (server.tampered() or "")
    os.kill(server.init.pid, signal.SIGCONT)
    changed = type(server.init)(**{**vars(server.init), "children": "12345"})
    assert "outlived" in server.init.differs(changed, server.uid or os.getuid())
    dumpable = type(server.init)(**{**vars(server.init), "owner": server.uid or os.getuid()})
    assert "dumpable" in server.init.differs(dumpable, server.uid or os.getuid())
    sandbox.shutdown()


def test_docs_name_every_denied_system_call():
    """docs/rewards.md lists the seccomp filter's system calls: it must not drift from _seccomp."""
    from gspo_trl.rewards.execution import _seccomp

    docs = (ROOT / "docs" / "rewards.md").read_text()
    names = (*_seccomp.DENIED, *_seccomp.OWN_PROCESS_ONLY, *_seccomp.WHOLE_UID)
    assert [name for name in names if f"`{name}`" not in docs] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="per-run sandbox uids exist only when running as root")
def test_a_daemon_that_kills_its_own_uid_is_still_killed(monkeypatch):
    """The cleanup's `kill -9 -1` helper runs as the sandbox uid, so a daemon of that uid that
    SIGKILLs everything it may (without pausing) killed the helper first and outlived cleanup
    (seen in CI under load: the uid was set aside). The cleanup kills from root too."""
    import subprocess

    from gspo_trl.rewards.execution import identity
    from gspo_trl.rewards.execution.identity import kill_uid, processes_of_uid, sandbox_python, sandbox_uid

    monkeypatch.setattr(identity, "KILL_DEADLINE_S", 2.0)  # a deadline, not a speed goal: 0.01 s rounds

    killer = (
        "import os\nwhile True:\n    for p in os.listdir('/proc'):\n"
        "        if p.isdigit() and int(p) not in (1, os.getpid()):\n"
        "            try:\n                os.kill(int(p), 9)\n"
        "            except OSError:\n                pass\n"
    )
    with sandbox_uid() as uid:
        daemon = subprocess.Popen(
            [sandbox_python(True), "-I", "-S", "-c", killer],
            user=uid,
            group=uid,
            extra_groups=[],
            env={},
            start_new_session=True,
        )
        try:
            time.sleep(0.3)
            assert processes_of_uid(uid) == [daemon.pid]
            kill_uid(uid)
            assert processes_of_uid(uid) == []
        finally:
            daemon.kill()
            daemon.wait()
