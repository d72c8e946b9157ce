"""Nothing a completion does to the sandbox outlives its job (issue 30, item 1).

A reused bwrap sandbox forks every job from one server of the jobs' uid, and fork(2) hands
the server's limits, nice value, scheduling policy and affinity to each job. A job that
lowered them (``prlimit64(1, RLIMIT_FSIZE, 1)``) made every later job of that server fail
before it ran: through ``rewards.get("code")`` in groups of 8 the attacker's group scored
[1,1,0,0,0,0,0,0] and every later honest group [1,0,0,0,0,0,0,0]. Three lines hold now, each
tested here: the seccomp filter refuses the call, the parent checks the server before every
reuse, and a job that never ran its code runs again in a fresh sandbox (and is reported).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gspo_trl import rewards
from gspo_trl.rewards.execution import identity, sandbox, servers

MODES = ["bwrap", "rlimit"]
GROUP = 8
SQUARE = [{"input": "3\n", "output": "9\n"}]
HONEST = "n = int(input())\nprint(n * n)"
# 80 MiB at once: passes under memory_mb 512 (256 MiB per process), fails under RLIMIT_DATA 60 MB.
MEMORY_HEAVY = "block = bytearray(80 << 20)\nn = int(input())\nprint(n * n)"
# The attacks aim at the server (pid 1 in bwrap) and at the parent (the trainer in rlimit mode),
# swallow the refusal, and answer right, so the attacker's own score says nothing.
_AIM = (
    "import os, resource\nfor pid in {1, os.getppid()}:\n"
    "    try:\n        %s\n    except OSError:\n        pass\n"
)
ATTACKS = {
    "RLIMIT_FSIZE": _AIM % "resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, 1))",
    "RLIMIT_DATA": _AIM % "resource.prlimit(pid, resource.RLIMIT_DATA, (60 << 20, 60 << 20))",
    "nice 19": _AIM % "os.setpriority(os.PRIO_PROCESS, pid, 19)",
    "SCHED_IDLE": _AIM % "os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))",
}
HONEST_FOR = {"RLIMIT_DATA": MEMORY_HEAVY}


@pytest.fixture(params=MODES)
def mode(request):
    if request.param == "bwrap" and not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    yield request.param
    sandbox.shutdown()


def fenced(program: str) -> str:
    return f"```python\n{program}\n```"


@pytest.mark.parametrize("attack", ["RLIMIT_FSIZE", "RLIMIT_DATA"])
def test_lowered_limits_do_not_outlive_the_attacking_job(mode, attack):
    """Groups of 8 through ``rewards.get("code")``: every honest completion after the attacker's
    job scores 1.0 (before: later groups [1,0,0,0,0,0,0,0] for FSIZE; DATA zeroed the heavy ones)."""
    honest = fenced(HONEST_FOR.get(attack, HONEST))
    reward = rewards.get("code", timeout=10.0, memory_mb=512, max_workers=2, sandbox=mode)
    attacker = fenced(ATTACKS[attack] + HONEST)
    first = reward([attacker] + [honest] * (GROUP - 1), tests=[SQUARE] * GROUP)
    later = [reward([honest] * GROUP, tests=[SQUARE] * GROUP) for _ in range(3)]
    assert first[1:] == [1.0] * (GROUP - 1) and later == [[1.0] * GROUP] * 3, (first, later)


PROBE = (
    "import os, resource\n"
    "print(os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0), len(os.sched_getaffinity(0)),"
    " resource.getrlimit(resource.RLIMIT_FSIZE)[1], resource.getrlimit(resource.RLIMIT_DATA)[1])"
)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_later_job_starts_with_the_sandboxs_own_settings(mode, attack):
    """Deterministic, no cgroup needed: the job after an attack runs at nice 0, SCHED_OTHER, on
    every CPU, with the sandbox's file-size limit and no data limit (before: nice 19, policy 5)."""
    sandbox.run({"kind": "stdio", "solution": ATTACKS[attack]}, mode=mode)
    import resource

    cpus, data = len(os.sched_getaffinity(0)), resource.getrlimit(resource.RLIMIT_DATA)[1]
    expected = [0, os.SCHED_OTHER, cpus, sandbox.Limits().file_mb << 20, data]
    for _ in range(4):  # whichever server the next jobs land in
        out = sandbox.run({"kind": "stdio", "solution": PROBE}, mode=mode).stdout.split()
        assert [int(v) for v in out] == expected, out


def test_the_seccomp_filter_refuses_calls_on_other_processes(mode):
    """Each call that sets a property of another process is refused (EPERM); the caller's own
    forms, which honest programs use (``setrlimit``, ``nice``, affinity of pid 0), still work."""
    program = (
        "import errno, json, os, resource\nout = {}\n"
        "def t(name, call):\n    try:\n        call()\n        out[name] = 'ok'\n"
        "    except OSError as err:\n        out[name] = errno.errorcode[err.errno]\n"
        "other = os.getppid() or 1\n"
        "t('prlimit other', lambda: resource.prlimit(other, resource.RLIMIT_NOFILE, (8, 8)))\n"
        "t('setpriority other', lambda: os.setpriority(os.PRIO_PROCESS, other, 19))\n"
        "t('setpriority uid', lambda: os.setpriority(os.PRIO_USER, 0, 19))\n"
        "idle = os.sched_param(0)\n"
        "t('sched_setscheduler other', lambda: os.sched_setscheduler(other, os.SCHED_IDLE, idle))\n"
        "t('sched_setparam other', lambda: os.sched_setparam(other, os.sched_param(0)))\n"
        "t('sched_setaffinity other', lambda: os.sched_setaffinity(other, {0}))\n"
        "t('kill -1', lambda: os.kill(-1, 0))\n"
        "t('setrlimit', lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32)))\n"
        "t('prlimit 0', lambda: resource.prlimit(0, resource.RLIMIT_NOFILE))\n"
        "t('nice', lambda: os.nice(1))\nt('sched_setaffinity 0', lambda: os.sched_setaffinity(0, {0}))\n"
        "t('kill self', lambda: os.kill(os.getpid(), 0))\nprint(json.dumps(out))"
    )
    result = sandbox.run({"kind": "stdio", "solution": program}, mode=mode)
    got = json.loads(result.stdout)
    refused = [name for name, value in got.items() if value == "EPERM"]
    assert sorted(refused) == sorted(n for n in got if "other" in n or n in ("setpriority uid", "kill -1"))
    assert all(value == "ok" for name, value in got.items() if name not in refused), got


def _as_server_uid(server: servers._Server, statement: str) -> None:
    """Act on the server's init from outside as its uid: what a job of that uid could do were
    the seccomp filter missing (root here lacks CAP_SYS_RESOURCE in some containers)."""
    user = {} if server.uid is None else {"user": server.uid, "group": server.uid, "extra_groups": []}
    code = f"import os, resource\npid = {server.init.pid}\n{statement}"
    subprocess.run([identity.sandbox_python(True), "-I", "-S", "-c", code], check=True, **user)


def _only_server() -> servers._Server:
    (server,) = [s for group in servers._idle.values() for s in group]
    return server


JOB = {"kind": "stdio", "solution": HONEST}
CHANGES = {
    "limits": ("resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, 1))", "resource limits"),
    "nice": ("os.setpriority(os.PRIO_PROCESS, pid, 19)", "nice"),
    "policy": ("os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))", "policy"),
    "affinity": ("os.sched_setaffinity(pid, {min(os.sched_getaffinity(pid))})", "affinity"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_server_is_retired_before_reuse(change):
    """The second line: a server whose inherited settings changed gets no further job."""
    if not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    statement, words = CHANGES[change]
    if change == "affinity" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the affinity cannot be narrowed")
    assert sandbox.run(JOB, b"3\n").stdout == b"9\n"
    server = _only_server()
    assert server.tampered() is None
    _as_server_uid(server, statement)
    assert words in (server.tampered() or "")
    assert sandbox.run(JOB, b"4\n").stdout == b"16\n"
    assert _only_server() is not server and server.proc.poll() is not None
    sandbox.shutdown()


def test_a_job_that_never_ran_is_run_again_in_a_fresh_sandbox(monkeypatch, caplog):
    """The third line, with the check before reuse switched off so a poisoned server gets the
    job: the harness cannot set the job up, the server says so, and the job runs again fresh."""
    if not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    assert sandbox.run(JOB, b"3\n").stdout == b"9\n"
    poisoned = _only_server()
    _as_server_uid(poisoned, CHANGES["limits"][0])
    monkeypatch.setattr(servers._Server, "tampered", lambda self: None)
    with caplog.at_level(logging.WARNING):
        result = sandbox.run(JOB, b"5\n")
    assert (result.stdout, result.sandbox_fault) == (b"25\n", False)
    assert "failed before its code ran" in caplog.text and "not allowed to raise" in caplog.text
    assert poisoned.proc.poll() is not None
    sandbox.shutdown()


ALARM = """
import logging, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))  # below the sandbox's 64: no job can start
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
from gspo_trl import rewards
reward = rewards.get("code", timeout=5.0, sandbox="rlimit", max_workers=2)
print(reward([{completion!r}] * 8, tests=[{tests!r}] * 8))
"""


def test_a_batch_the_sandbox_failed_raises_an_alarm():
    """Runs that never ran their code score 0 but are named in one warning for the batch
    (before: rc 111, score 0, no log line). A trainer whose own open-file limit is below the
    sandbox's makes every job fail that way."""
    script = ALARM.format(completion=fenced(HONEST), tests=SQUARE)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]" in done.stdout
    assert "8 of 8 runs in this batch of 8 completions failed in the sandbox" in done.stdout, done.stdout


# Under a cpu cgroup (containers, slurm) jobs compete with the trainer by weight (outside one,
# each job's new session is its own autogroup and a nice value changes nothing): a busy loop
# shares one CPU with the reward, and honest jobs need ~0.3 s of CPU each: at nice 19 (weight
# 15 against the loop's 1024) that is over 20 s, past the 10 s timeout; at nice 0 about 1 s.
STARVED = """
import json, os, subprocess, sys
for group in sys.argv[3:]:
    with open(group + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
# The busy loop dies with us (PR_SET_PDEATHSIG), whatever happens to us.
loop = "import ctypes\\nctypes.CDLL(None).prctl(1, 9)\\nwhile True:\\n    pass"
hog = subprocess.Popen([sys.executable, "-c", loop])
from gspo_trl import rewards
reward = rewards.get("code", timeout=10.0, max_workers=2, sandbox=sys.argv[1])
tests = [[{"input": "3\\n", "output": "9\\n"}]] * 8
honest = "```python\\ns = sum(range(8_000_000))\\nn = int(input())\\nprint(n * n)\\n```"
attacker = "```python\\n" + sys.argv[2] + "s = sum(range(8_000_000))\\nn = int(input())\\nprint(n * n)\\n```"
try:
    scores = [reward([attacker] + [honest] * 7, tests)] + [reward([honest] * 8, tests) for _ in range(2)]
finally:
    hog.kill()
print(json.dumps(scores))
"""


def _one_cpu_cgroup(name: str) -> list[Path]:
    """A cgroup limited to one CPU that also takes the processes out of autogroup scheduling:
    cgroup v1's cpu + cpuset hierarchies, or a cgroup v2 child with the cpuset controller.
    Skips (naming why) where neither can be made."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    first_cpu = str(min(os.sched_getaffinity(0)))
    v1 = [Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpuset")]
    try:
        if all((root / "cgroup.procs").exists() for root in v1):
            made = [root / name for root in v1]
            for group in made:
                group.mkdir()
            (made[1] / "cpuset.cpus").write_text(first_cpu)
            (made[1] / "cpuset.mems").write_text((v1[1] / "cpuset.mems").read_text())
            return made
        root = Path("/sys/fs/cgroup")
        if not (root / "cgroup.subtree_control").exists():
            pytest.skip("no cgroup v1 cpu/cpuset hierarchy and no cgroup v2 at /sys/fs/cgroup")
        (root / "cgroup.subtree_control").write_text("+cpuset +cpu")
        made = [root / name]
        made[0].mkdir()
        (made[0] / "cpuset.cpus").write_text(first_cpu)
        return made
    except OSError as err:
        pytest.skip(f"cannot make a one-CPU cgroup here: {err}")


def _remove(group: Path) -> None:
    """Kill what is left in the group (every process in it is this test's), then rmdir once
    they are gone (the subprocess's sandboxes die with it, asynchronously)."""
    import signal

    deadline = time.monotonic() + 30
    while (pids := (group / "cgroup.procs").read_text().split()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.05)
    group.rmdir()


@pytest.mark.parametrize("attack", ["nice 19", "SCHED_IDLE"])
def test_a_lowered_priority_does_not_starve_later_jobs_under_a_cpu_cgroup(mode, attack):
    """Before: the server reniced to 19 or set to SCHED_IDLE by one completion timed out one honest
    completion in every later group of 8 (the one its server took; 8/8 -> 0/8 with one server)."""
    groups = _one_cpu_cgroup(f"gspo-trl-test-{os.getpid()}")
    try:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        argv = [sys.executable, "-c", STARVED, mode, ATTACKS[attack], *map(str, groups)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    finally:
        for group in groups:
            _remove(group)
    assert done.returncode == 0, done.stderr[-2000:]
    first, *later = json.loads(done.stdout)
    assert first[1:] == [1.0] * (GROUP - 1) and later == [[1.0] * GROUP] * 2, (first, later)
