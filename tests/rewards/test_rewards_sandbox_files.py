"""A job's writable places hold a bounded number of files (issue 30, item 7).

tmpfs's ``size=`` counts bytes only: a flood of empty files and hard links held ~400 MB of
kernel memory beyond every cap, and in the rlimit mode (cwd on the host's disk) removing it
blocked the reward call 11-88 s past a 3 s timeout. Now each writable place is a tmpfs with
``nr_inodes`` = ``Limits.tmpfs_files`` (``_tmpfs``), in both modes and both bwrap paths.
"""

from __future__ import annotations

import json

import pytest

from gspo_trl.rewards.execution import jail, sandbox

# Empty files and hard links, alternately, until the kernel says no; then what it said.
FLOOD = (
    "import errno, json, os\nn = 0\nos.close(os.open('seed', os.O_CREAT | os.O_WRONLY))\ntry:\n"
    "    while True:\n        if n % 2:\n            os.link('seed', 'l%d' % n)\n"
    "        else:\n            os.close(os.open('f%d' % n, os.O_CREAT | os.O_WRONLY))\n        n += 1\n"
    "except OSError as err:\n"
    "    cap = os.statvfs('.').f_files\n"
    "    print(json.dumps({'made': n, 'error': errno.errorcode[err.errno], 'cap': cap}))\n"
)


def _skip_if_refused() -> None:
    """Where the kernel refuses the namespaces (Ubuntu 24.04's AppArmor profile for bwrap refuses
    nested user namespaces) the sandbox says so once, and there is nothing to test."""
    if jail.warn_files_uncapped.cache_info().currsize:
        pytest.skip("the kernel refused the namespaces that cap a tmpfs's files (logged by the sandbox)")


PATHS = {"bwrap": ("server", "fresh"), "rlimit": ("fresh",)}
LIMITS = sandbox.Limits(wall_s=20.0, cpu_s=20)


@pytest.fixture(params=[(mode, path) for mode, paths in PATHS.items() for path in paths], ids="-".join)
def mode(request, monkeypatch):
    mode, path = request.param
    if mode == "bwrap" and not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    monkeypatch.setenv("GSPO_TRL_SANDBOX_SERVERS", "1" if path == "server" else "0")
    yield mode
    sandbox.shutdown()


def test_a_file_flood_stops_at_the_cap(mode):
    """The flood ends with ENOSPC at ``tmpfs_files``, long before its wall limit (before: it ran
    until the wall limit, 3 s on this machine, ~10^5 files in one process)."""
    result = sandbox.run({"kind": "stdio", "solution": FLOOD}, limits=LIMITS, mode=mode)
    _skip_if_refused()
    assert not result.timed_out, result
    got = json.loads(result.stdout)
    assert got["error"] == "ENOSPC" and got["cap"] <= LIMITS.tmpfs_files and got["made"] < LIMITS.tmpfs_files


def test_dev_shm_is_capped_too():
    if not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    program = "import os\nprint(os.statvfs('/tmp').f_files, os.statvfs('/dev/shm').f_files)"
    result = sandbox.run({"kind": "stdio", "solution": program}, limits=LIMITS)
    _skip_if_refused()
    assert result.stdout.split() == [str(LIMITS.tmpfs_files).encode()] * 2
    sandbox.shutdown()


MOUNT = (
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nos.makedirs('big', exist_ok=True)\n"
    "def mounted():\n    return libc.mount(b'none', b'big', b'tmpfs', 0, b'size=2g') == 0\n"
)

CAPS = (
    "def caps():\n"
    "    lines = dict(l.split(':', 1) for l in open('/proc/self/status') if l.startswith('Cap'))\n"
    "    return [int(lines['CapEff'], 16), int(lines['CapPrm'], 16)]\n"
)


def test_a_job_that_never_execs_holds_no_capability(mode):
    """The namespace that owns the capped tmpfs gave its owner CAP_SYS_ADMIN; a ``call`` job runs
    in the harness's process, without an exec that would drop it: it must not mount (an
    uncapped tmpfs of its own), so the capabilities are dropped before any job code runs."""
    job = {"kind": "call", "solution": MOUNT, "fn_name": "mounted", "args": []}
    result = sandbox.run(job, limits=LIMITS, mode=mode)
    assert result.verdict is not None and result.verdict.get("value") is False, result
    status = sandbox.run({"kind": "call", "solution": CAPS, "fn_name": "caps", "args": []}, mode=mode)
    assert status.verdict is not None and status.verdict.get("value") == [0, 0], status


def test_removing_a_tree_never_touches_its_parent(tmp_path):
    """Two processes removing the same stale directory: the loser's rmtree error handler once
    chmodded the parent (the host's /tmp) to 0700, and every later sandbox uid was locked out."""
    from gspo_trl.rewards.execution import identity

    tmp_path.chmod(0o1777)
    identity.remove_tree(str(tmp_path / "gone already"))
    locked = tmp_path / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner").chmod(0)
    identity.remove_tree(str(locked))
    assert not locked.exists() and tmp_path.stat().st_mode & 0o7777 == 0o1777


WALL_S, MARGIN_S = 3.0, 5.0
# Files and links until the wall clock or the cap, a fresh seed every 50,000 links (ext4's limit
# is 65,000 per inode).
ENDLESS_FLOOD = (
    "import os\nn = 0\nwhile True:\n    if n % 100_000 == 0:\n"
    "        seed = 's%d' % n\n        os.close(os.open(seed, os.O_CREAT | os.O_WRONLY))\n"
    "    if n % 2:\n        os.link(seed, 'l%d' % n)\n    else:\n"
    "        os.close(os.open('f%d' % n, os.O_CREAT | os.O_WRONLY))\n    n += 1\n"
)


@pytest.mark.parametrize("sandbox_mode", ["bwrap", "rlimit"])
def test_clean_up_after_a_flood_does_not_hold_the_reward_call(sandbox_mode):
    """The reward call returns within its timeout plus a margin (before: the rlimit mode's
    clean-up blocked it 11-88 s past a 3 s timeout; a bwrap server's took 12 s past a 20 s one)."""
    import time

    from gspo_trl import rewards

    if sandbox_mode == "bwrap" and not sandbox.bwrap_works():
        pytest.skip("bubblewrap is not usable on this machine")
    reward = rewards.get("code", timeout=WALL_S, sandbox=sandbox_mode)
    start = time.monotonic()
    completion = f"```python\n{ENDLESS_FLOOD}\n```"
    assert reward([completion], tests=[[{"input": "", "output": "x\n"}]]) == [0.0]
    assert time.monotonic() - start < WALL_S + MARGIN_S
    sandbox.shutdown()


def test_a_deeply_nested_tree_is_removed(tmp_path):
    """Directories nested deeper than Python's recursion limit (a job's own cwd on the host's
    disk, where the kernel refuses a capped tmpfs): shutil.rmtree raised RecursionError on
    Python < 3.12, the run failed and the directory stayed."""
    import os

    from gspo_trl.rewards.execution import identity

    top = tmp_path / "deep"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(3_000):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    identity.remove_tree(str(top))
    assert not top.exists()


def test_docs_quote_the_file_cap():
    """docs/rewards.md states the cap in words; it must be Limits' default."""
    from tests._paths import ROOT

    docs = (ROOT / "docs" / "rewards.md").read_text()
    assert f"{sandbox.Limits().tmpfs_files:,} files" in docs
