#!/usr/bin/env bash
# GPU throughput bench (part of scripts/gpu_check.sh): GSPO steps on random-init Qwen3-0.6B and
# Qwen3-1.7B (their real architectures, built locally), every completion exactly --completion tokens; prints
# tokens/s/GPU, the phase split and the update's MFU beside `gspo-trl plan`'s floor per step
# (scripts/gpu_bench.py says what each figure is). One GPU, < 8 min, no hub access, no vLLM,
# no DeepSpeed. What the GPU machine needs (wheels in .whl/): the header of scripts/gpu_run.sh.
#
# Usage: scripts/gpu_bench.sh [--rollout-batches 2] [--batch 8] [--completion 512] [--output-dir DIR]
#        scripts/gpu_bench.sh --dry-run     # CPU, tiny model, 2 steps: checks the wiring only
# A --dry-run installs the wheels too (`make gpu-wheels`); GPU_RUN_NO_WHEELS=1 uses this Python's own.
exec "$(dirname "$0")/gpu_run.sh" gpu_bench.py "$@"
