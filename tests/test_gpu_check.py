"""scripts/gpu_check.sh --dry-run end to end on CPU (the wrapper, then its three parts as real
subprocesses, none of which may call CUDA; the bench's table holds its run's own figures), a
failing part's non-zero exit, and the wrapper's setup for a bare Python 3.12 GPU machine:
`python3`, one GPU on an 8-GPU node, `pip check`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._paths import ROOT
from tests._scripts import load_script
from tests.test_gpu_smoke import CUDA_CALLS

GUARD = f"""
import sys

if sys.argv and "gpu_" in sys.argv[0] and sys.argv[0].endswith(".py"):  # not the wrapper's checks
    import torch

    def _refuse(*args, **kwargs):
        raise AssertionError(sys.argv[0] + " --dry-run called CUDA")

    for _name in {CUDA_CALLS!r}:
        setattr(torch.cuda, _name, _refuse)
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    guard = tmp_path / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(GUARD)
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(guard), "GSPO_TRL_CPU_THREADS": "1"}
    env["WHEELS"] = str(tmp_path / "no-wheels")
    env["GPU_RUN_NO_WHEELS"] = "1"  # CI fetches no wheels: this Python has them (tests/test_gpu_wheels.py)
    return {**env, **extra}


@pytest.mark.slow
def test_dry_run_runs_every_part_and_prints_one_table(tmp_path):
    out = tmp_path / "check"
    command = [str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--output-dir", str(out)]
    result = subprocess.run(command, env=_env(tmp_path), capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    outcomes = json.loads((out / "gpu_check.json").read_text())
    assert [o["part"] for o in outcomes] == ["smoke", "bench", "moe replay"]
    assert all(o["status"] == "ok" for o in outcomes), outcomes
    table = result.stdout[result.stdout.index("GPU check on CPU (dry run") :]
    assert "all parts passed" in table
    assert "first-minibatch float32 0/384 flips (floor 0.1%); bf16 0/384 flips (floor 1.0%)" in table
    assert "not checked on this machine:" in table and "vLLM: the vllm 0.31 wheel" in table
    assert "measured/plan: GSPO full fine-tuning n/a/" in table and "tok/s, MFU" in table
    assert_the_bench_prints_its_runs_own_perf_window(out / "bench", result.stdout)


def assert_the_bench_prints_its_runs_own_perf_window(out: Path, stdout: str) -> None:
    """The bench part (scripts/gpu_bench.py --dry-run, as `scripts/gpu_bench.sh --dry-run` runs
    it): its table's figures are the run's own `perf/*` log, not numbers of the script's. Read
    from the check's own bench part: a second dry run of the bench cost ~20 s of CI."""
    bench = json.loads((out / "gpu_bench.json").read_text())
    [row] = bench["rows"]
    events = [json.loads(line) for line in (out / "tiny-run" / "metrics.jsonl").read_text().splitlines()]
    [window] = [event for event in events if "perf/wall_s" in event]  # one rollout batch, one window
    assert row["generated_tokens_per_s_per_gpu"] == window["perf/tokens_per_s"]
    assert row["trained_tokens_per_s_per_gpu"] == window["perf/trained_tokens_per_s"]
    assert row["update_mfu"] == window["perf/mfu"]
    assert row["phase_seconds"]["update"] == window["perf/update_s"] > 0
    assert window["perf/generated_tokens"] == row["completions_per_rollout_batch"] * row["completion_tokens"]
    assert window["completions/min_length"] == window["completions/max_length"] == row["completion_tokens"]
    assert row["plan_gpu"] == "H200" and row["plan_floor_seconds_per_step"] > 0
    assert "GSPO throughput on CPU, dry run" in stdout
    assert "phase split, % of the window's wall time:" in stdout


def test_a_failing_or_slow_part_fails_the_check(tmp_path, capsys):
    """A part that exits 1, one past its budget and one whose figures fail: exit 1, each named."""
    check = load_script("gpu_check")
    (tmp_path / "fails.py").write_text("import sys; sys.exit(1)\n")
    (tmp_path / "hangs.py").write_text("import time\nwhile True: time.sleep(1)\n")
    (tmp_path / "flips.py").write_text(
        "import json, sys\nfrom pathlib import Path\n"
        "out = Path(sys.argv[sys.argv.index('--output-dir') + 1])\n"
        "row = {'precision': 'bf16', 'flips': 12, 'pairs': 384, 'noise_floor': 0.01, 'passed': False}\n"
        "(out / 'r.json').write_text(json.dumps({'rows': [row], 'replay_over_off_step_time': 1.1}))\n"
    )
    parts = (
        check.Part("fails", str(tmp_path / "fails.py"), (), 60, "r.json", check.summarize_moe),
        check.Part("hangs", str(tmp_path / "hangs.py"), (), 1, "r.json", check.summarize_moe),
        check.Part("flips", str(tmp_path / "flips.py"), (), 60, "r.json", check.summarize_moe),
    )
    assert check.main(["--dry-run", "--output-dir", str(tmp_path / "out")], parts) == 1
    table = capsys.readouterr().out
    assert "fails       FAILED" in table and "exit 1" in table
    assert "hangs       TIMED OUT" in table
    assert "flips       FAILED" in table and "bf16 12/384 flips (floor 1.0%)" in table
    assert "FAILED: fails, hangs, flips" in table


def test_smoke_fails_when_the_plan_under_counts():
    check = load_script("gpu_check")
    row = {"run": "GSPO full fine-tuning", "planned_peak_bytes": 10 * 2**30}
    assert check.summarize_smoke([{**row, "measured_peak_bytes": 11 * 2**30}])[0]  # 1.10x: within
    assert not check.summarize_smoke([{**row, "measured_peak_bytes": 12 * 2**30}])[0]


def _probe(tmp_path: Path) -> str:
    """A script gpu_run.sh runs (it resolves SCRIPT under scripts/): prints what it was given."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, os, sys\n"
        "print(json.dumps({'devices': os.environ.get('CUDA_VISIBLE_DEVICES'), 'python': sys.executable,"
        " 'offline': os.environ.get('HF_HUB_OFFLINE')}))\n"
    )
    return os.path.relpath(probe, ROOT / "scripts")


@pytest.mark.parametrize(("visible", "expected"), [(None, "0"), ("3,4,5,6", "3"), ("2", "2")])
def test_wrapper_keeps_one_gpu_of_a_node(tmp_path, visible, expected):
    """gspo_trl refuses n_gpu > 1 without a launcher: on an 8-GPU node the wrapper keeps one."""
    env = _env(tmp_path)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    result = subprocess.run(
        [str(ROOT / "scripts" / "gpu_run.sh"), _probe(tmp_path)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["devices"] == expected and seen["offline"] == "1"
    assert ("one GPU: CUDA_VISIBLE_DEVICES=" in result.stderr) == (visible != expected)


def test_wrapper_runs_python3_where_there_is_no_python(tmp_path):
    """A bare machine has `python3`, not `python`: the wrapper's default."""
    bin_dir, used = tmp_path / "bin", tmp_path / "python3-used"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\ntouch {used}\nexec {sys.executable} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    env = _env(tmp_path, PATH=f"{bin_dir}:/usr/bin:/bin")
    env.pop("PYTHON")
    result = subprocess.run(
        [str(ROOT / "scripts" / "gpu_run.sh"), _probe(tmp_path)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert used.is_file()


def test_wrapper_refuses_a_broken_requirement_of_ours(tmp_path):
    """`pip check` naming one of the packages this project needs stops the run before it starts."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(
        f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ] && [ "$3" = check ]; then\n'
        "  echo 'trl 1.16.0 has requirement datasets>=3.0.0, but you have datasets 2.0.0.'; exit 1\nfi\n"
        f'exec {sys.executable} "$@"\n'
    )
    (fake / "python3").chmod(0o755)
    env = _env(tmp_path, PYTHON=str(fake / "python3"))
    result = subprocess.run(
        [str(ROOT / "scripts" / "gpu_run.sh"), _probe(tmp_path)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 2 and "pip check: trl 1.16.0 has requirement datasets" in result.stderr


def test_moe_flips_are_a_count_over_token_layer_pairs_failing_above_the_noise_floor():
    """One bf16 near-tie flipped in 1,152 first-minibatch pairs passes; 1.1% fails; float32's
    floor is tighter. (On main any first-minibatch rate above exactly 0 failed the check.)"""
    check, replay = load_script("gpu_check"), load_script("gpu_moe_replay")
    pairs_each = replay.MINIBATCH * replay.COMPLETION_TOKENS * 4  # the tiny MoE: 4 sparse layers
    one_tie = replay.flip_row("bf16", [1 / pairs_each, 0.0, 0.0], 4)
    assert (one_tie["flips"], one_tie["pairs"], one_tie["passed"]) == (1, 1152, True)
    many = replay.flip_row("bf16", [5 / pairs_each, 4 / pairs_each, 4 / pairs_each], 4)
    assert (many["flips"], many["passed"]) == (13, False)  # 1.13% > 1%
    assert replay.flip_row("float32", [1 / pairs_each, 0.0, 0.0], 4)["passed"]  # 0.09% <= 0.1%
    assert not replay.flip_row("float32", [2 / pairs_each, 0.0, 0.0], 4)["passed"]
    assert not replay.flip_row("bf16", [], 4)["passed"]  # nothing logged
    passed, line = check.summarize_moe({"rows": [one_tie], "replay_over_off_step_time": 1.04})
    assert passed and line == "first-minibatch bf16 1/1152 flips (floor 1.0%); step time old/off 1.04"


def test_the_whole_check_with_its_installation_fits_9_minutes():
    """gpu_check.sh's cap is 540 s (9 of a device command's 10 minutes), installation included,
    and the parts' budgets plus the installation's fit under it (main: 540 s of parts, 590 s cap,
    the installation outside)."""
    check = load_script("gpu_check")
    header = (ROOT / "scripts" / "gpu_check.sh").read_text()
    cap = int(header.split("GPU_RUN_TIMEOUT:-", 1)[1].split("}", 1)[0])
    assert cap <= 540
    assert sum(part.budget_s for part in check.PARTS) + check.INSTALL_S <= cap
    assert "must carry `.whl`" in header and "make gpu-wheels" in header


def test_the_summary_and_docs_vllm_name_what_the_lent_machine_cannot_check():
    check = load_script("gpu_check")
    table = check.summary_table([], "NVIDIA H200")
    doc = (ROOT / "docs" / "vllm.md").read_text()
    for fact in ("320 MB", "torch 2.13", "2.11", "64 MiB"):
        assert fact in table and fact in doc, fact
    assert "not checked on this machine:" in table and "DeepSpeed ZeRO, several GPUs" in table
    assert (
        "| not checked on the lent machine |" in doc and "`vLLM tests: N skipped (vllm not installed)`" in doc
    )
