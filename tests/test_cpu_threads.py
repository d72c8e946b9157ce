"""torch's threads on a CPU run follow the cores that are free, not the cores there are."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gspo_trl.core.cpu_threads import OVERRIDE, free_cores, size_torch_threads, threads_for, usable_cores


@pytest.mark.parametrize(
    ("free", "processes", "threads"),
    [
        (2.0, 1, 2),
        (1.0, 1, 1),
        (1.7, 1, 2),
        (1.5, 1, 1),
        (0.2, 1, 1),
        (16.0, 2, 8),
        (15.9, 4, 4),
        (0.0, 8, 1),
    ],
)
def test_threads_are_the_free_cores_shared_among_the_processes(free, processes, threads) -> None:
    assert threads_for(free, processes) == threads


def test_a_busy_process_is_seen() -> None:
    """With a spinning process on the machine, at least ~0.6 of a core is not free."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        free = free_cores(sample_seconds=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert 0.0 <= free <= usable_cores() - 0.6, free


@pytest.fixture
def torch_threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("torch_threads_restored")
@pytest.mark.parametrize(
    ("variable", "value", "expected"), [(OVERRIDE, "1", 1), ("OMP_NUM_THREADS", "3", None)]
)
def test_a_users_choice_is_kept(monkeypatch, variable, value, expected) -> None:
    monkeypatch.delenv(OVERRIDE, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(variable, value)
    before = torch.get_num_threads()
    line = size_torch_threads()
    assert f"({variable}={value})" in line
    assert torch.get_num_threads() == (expected or before)


@pytest.mark.usefixtures("torch_threads_restored")
def test_without_a_choice_the_line_says_how_many_and_why(monkeypatch) -> None:
    monkeypatch.delenv(OVERRIDE, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    line = size_torch_threads(local_processes=2)
    assert line.startswith(f"CPU threads: {torch.get_num_threads()} (") and "shared by 2 processes" in line
    assert OVERRIDE in line


@pytest.mark.usefixtures("torch_threads_restored")
def test_a_later_stage_says_the_count_only_when_it_changed(monkeypatch) -> None:
    """The demo sizes before its warm start and again before GSPO: one line, not the same twice."""
    from gspo_trl.core.cpu_threads import resize_torch_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(OVERRIDE, "1")
    assert size_torch_threads() == f"CPU threads: 1 ({OVERRIDE}=1)"
    assert resize_torch_threads() is None
    monkeypatch.setenv(OVERRIDE, "2")
    assert resize_torch_threads() == f"CPU threads: 2 ({OVERRIDE}=2)"
    assert torch.get_num_threads() == 2
