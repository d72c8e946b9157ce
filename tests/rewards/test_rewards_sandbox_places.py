"""A job leaves nothing the next job can trip over (issue 39): each job of a reused bwrap
server gets its own new /tmp, /dev/shm and IPC namespace, and the setxattr family, io_uring
and POSIX message queues are refused.

On main a completion that put a default POSIX ACL on the server's /tmp and /dev/shm made
later honest jobs of that server score 0 (``u::-wx``: the solution file written but not
readable; ``u::r-x``: a call/check job's temp dir not writable), silently.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from gspo_trl import rewards
from gspo_trl.rewards.execution import jail, sandbox, servers

needs_bwrap = pytest.mark.skipif(not sandbox.bwrap_works(), reason="bubblewrap cannot run here")
GROUP, LATER_GROUPS = 8, 4


def acl_attack(owner_perm: int) -> str:
    """A completion setting a default ACL ``u::<owner_perm>`` on /tmp and /dev/shm, then doing
    the task (``f``, and the stdio answer) so its own group looks honest."""
    return (
        "import os, struct, sys\n"
        "ACL = struct.pack('<I', 2) + b''.join(struct.pack('<HHI', t, p, 0xFFFFFFFF)"
        f" for t, p in ((1, {owner_perm}), (4, 7), (0x20, 7)))\n"
        "for place in ('/tmp', '/dev/shm'):\n    try:\n"
        "        os.setxattr(place, 'system.posix_acl_default', ACL)\n    except OSError:\n        pass\n"
        "def f(x):\n    return x * x\n"
        "if __name__ == '__main__':\n    print(int(sys.stdin.readline()) ** 2)\n"
    )


# Honest solutions that use a temporary directory, as many real ones do.
HONEST_STDIO = (
    "import tempfile\nn = int(input())\nwith tempfile.TemporaryDirectory() as d:\n"
    "    open(d + '/a', 'w').write('1')\nprint(n * n)"
)
HONEST_FN = (
    "import tempfile\ndef f(x):\n    with tempfile.TemporaryDirectory() as d:\n"
    "        open(d + '/a', 'w').write('1')\n    return x * x"
)
KINDS = {  # kind: (attack's owner permission, honest solution, the row's tests, entry_point)
    "stdio": (0o3, HONEST_STDIO, [{"input": "7\n", "output": "49\n"}], None),
    "call": (0o5, HONEST_FN, {"inputs": [[7]], "outputs": [49], "fn_name": "f"}, None),
    "check": (0o5, HONEST_FN, "def check(candidate):\n    assert candidate(7) == 49\n", "f"),
}


def _fenced(program: str) -> str:
    return f"```python\n{program}\n```"


@needs_bwrap
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_acl_attack_leaves_every_later_honest_group_at_one(kind) -> None:
    perm, honest, tests, entry_point = KINDS[kind]
    reward = rewards.get("code", timeout=3.0, sandbox="bwrap")
    extra = {} if entry_point is None else {"entry_point": [entry_point] * GROUP}
    group = [_fenced(acl_attack(perm))] + [_fenced(honest)] * (GROUP - 1)
    reward(group, tests=[tests] * GROUP, **extra)
    later = [reward([_fenced(honest)] * GROUP, tests=[tests] * GROUP, **extra) for _ in range(LATER_GROUPS)]
    assert later == [[1.0] * GROUP] * LATER_GROUPS


@needs_bwrap
def test_each_job_of_a_reused_server_starts_on_empty_places() -> None:
    """Three jobs, one server: each finds /tmp and /dev/shm empty (but its work dir) and /tmp
    writable by all, whatever the one before left there or did to them."""
    program = (
        "import json, os, stat\nseen = sorted(os.listdir('/tmp')) + sorted(os.listdir('/dev/shm'))\n"
        "mode = stat.S_IMODE(os.stat('/tmp').st_mode)\n"
        "open('/tmp/left', 'w').write('x')\nopen('/dev/shm/left', 'w').write('x')\n"
        "os.mkdir('/tmp/locked', 0)\nos.chmod('/tmp', 0o700)\nos.chmod('/dev/shm', 0o500)\n"
        "print(json.dumps([seen, mode]))"
    )
    sandbox.shutdown()
    seen, pools = [], []
    for _ in range(3):
        result = sandbox.run({"kind": "stdio", "solution": program}, limits=sandbox.Limits(wall_s=5.0))
        seen.append(json.loads(result.stdout))
        pools.append(servers.idle_pids())
    assert len(pools[0]) == 1 and pools[0] == pools[1] == pools[2]  # one server, reused
    assert seen == [[["job"], 0o1777]] * 3


def test_rlimit_jobs_get_a_new_capped_tmp_and_dev_shm_of_their_own() -> None:
    """Item 3: the rlimit mode's /tmp was the host's, uncapped (a probe left 77,260 files
    there). Where user namespaces are allowed its job now sees a new /tmp (its cwd) and
    /dev/shm, capped in files, and none of the host's; the docs say what happens elsewhere."""
    marker = Path(tempfile.gettempdir()) / f"gspo-host-marker-{os.getpid()}"
    marker.write_text("the host's /tmp")
    program = (
        "import json, os\nprint(json.dumps([os.getcwd(), os.statvfs('/tmp').f_files,"
        f" os.statvfs('/dev/shm').f_files, os.path.exists({str(marker)!r}), sorted(os.listdir('/tmp'))]))"
    )
    try:
        result = sandbox.run({"kind": "stdio", "solution": program}, mode="rlimit")
    finally:
        marker.unlink()
    if jail.warn_files_uncapped.cache_info().currsize:
        pytest.skip("the kernel refused the namespaces (docs/rewards.md: the host's /tmp, uncapped)")
    cap = sandbox.Limits().tmpfs_files
    assert json.loads(result.stdout) == ["/tmp", cap, cap, False, ["solution.py"]], result
