#!/usr/bin/env bash
# The one GPU check (scripts/gpu_check.py): the smoke (measured peak memory against
# `gspo-trl plan`), the bench (tokens/s, MFU, phase split) and a tiny-MoE run with
# `moe.routing_replay: old` (first-minibatch flip rate exactly 0, replay's step-time overhead),
# then one summary table; exit 1 when any part fails. One GPU (the first of
# CUDA_VISIBLE_DEVICES), no hub access, no vLLM, no DeepSpeed, stopped at 590 s. What the GPU
# machine needs (python3 3.12 with torch, transformers, accelerate, peft; wheels in .whl/): the
# header of scripts/gpu_run.sh.
#
# Usage: scripts/gpu_check.sh [--output-dir runs/gpu-check]
#        scripts/gpu_check.sh --dry-run     # CPU, tiny models: checks the wiring (CI runs it)
GPU_RUN_TIMEOUT=${GPU_RUN_TIMEOUT:-590} exec "$(dirname "$0")/gpu_run.sh" gpu_check.py "$@"
