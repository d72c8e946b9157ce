"""Run a vLLM-CPU driver script in its own Python process and read the `FACTS=` JSON it prints:
vLLM's engine and its process group are torn down with the process, not inside pytest's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests._paths import ROOT


def driver_facts(driver: str, *args: str, timeout: int = 400) -> dict:
    """`python -c driver *args` with the CPU shim on and the hub offline; its FACTS, or a failure
    showing the output's tails."""
    env = {k: v for k, v in os.environ.items() if k != "GSPO_TRL_DISABLE_VLLM_CPU_SHIM"}
    env.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, "-c", driver, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0 and "FACTS=" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.split("FACTS=", 1)[1])
