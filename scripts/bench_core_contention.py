"""Do this machine's cores slow each other? One pinned worker alone vs. beside a second, alternating.

    python scripts/bench_core_contention.py                  # 8 rounds of 2 s per kind, ~2 min
    python scripts/bench_core_contention.py --rounds 2 --seconds 0.5

scripts/bench_overlap.py pins the vLLM server to core 0 and the trainer to core 1 and reads the
overlap's gain as if the two were independent machines. This checks that premise: a worker on core
0 counts its iterations for `--seconds` alone, then again while an identical worker runs on core 1,
round after round. A rate together / alone of 1.00 says the cores are independent; below 1 every
round says they contend (hyperthread siblings, a shared power budget); a spread on both sides of
1 is the cores' own drift. Two kinds of work: a pure-Python loop (interpreter-bound, as a tiny
model's generation mostly is: vLLM's scheduler, the sampler, HTTP) and a float32 matmul (BLAS).

Prints one line per kind, exactly:

    KIND core 0 rate together / alone per round: R1 R2 ... median M
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys

WORKER = r"""
import sys, time
kind, seconds = sys.argv[1], float(sys.argv[2])
if kind == "matmul":
    import numpy as np
    a = np.random.default_rng(0).random((256, 256), dtype=np.float32)
start, n = time.perf_counter(), 0
while time.perf_counter() - start < seconds:
    if kind == "python":
        total = 0
        for i in range(20000):
            total += i * i
    else:
        a @ a
    n += 1
print(n / (time.perf_counter() - start))
"""
KINDS = ("python", "matmul")
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="alone/together pairs per kind")
    parser.add_argument("--seconds", type=float, default=2.0, help="each worker's run")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds must be >= 1 and --seconds > 0")
    return args


def rates(cores: list[int], kind: str, seconds: float) -> list[float]:
    """Iterations per second of one worker pinned to each of `cores`, all started together."""
    env = {**os.environ, **ONE_THREAD}
    workers = [
        subprocess.Popen(
            ["taskset", "-c", str(core), sys.executable, "-c", WORKER, kind, str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for core in cores
    ]
    outputs = [worker.communicate(timeout=60 + 10 * seconds)[0] for worker in workers]
    for core, worker in zip(cores, workers, strict=True):
        if worker.returncode != 0:
            raise SystemExit(f"error: the {kind} worker on core {core} exited with {worker.returncode}")
    return [float(out) for out in outputs]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("error: needs `taskset` and two cores this process may run on (cores 0 and 1)")
    for kind in args.kinds:
        ratios = []
        for _ in range(args.rounds):
            alone = rates([0], kind, args.seconds)[0]
            together = rates([0, 1], kind, args.seconds)[0]
            ratios.append(together / alone)
        shown = " ".join(f"{ratio:.2f}" for ratio in ratios)
        print(
            f"{kind} core 0 rate together / alone per round: {shown} median {statistics.median(ratios):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
