"""Hostile programs, run for real in both sandbox modes.

Every case must score 0 (or its honest score), return within its wall-clock limit plus a
small margin, leave no process behind, and leave this (calling) process alive. Limits are
small so the battery is safe for the machine: 256 MiB of address space, 16 MiB per file,
64 processes, 2 s of wall clock.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

import rewards
from rewards.execution import sandbox
from rewards.execution.identity import MARKER

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


def test_killing_its_parent_fails_the_job_only(mode):
    """The job's parent is the harness or the sandbox server: killing it costs the job, nothing else."""
    program = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(9)"
    fn = code_reward(mode)
    assert fn([fenced(program)], tests=[STDIO_ECHO]) == [0.0]
    assert fn([fenced("print(int(input()) ** 2)")], tests=[STDIO_ECHO]) == [1.0]  # a fresh sandbox takes over
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
    assert {p.name for p in base.glob("gspo-sandbox-*")} <= before
