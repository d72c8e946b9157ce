#!/usr/bin/env bash
# The one GPU check (scripts/gpu_check.py): the smoke (measured peak memory against
# `gspo-trl plan`), the bench (tokens/s, MFU, phase split) and a tiny-MoE run with
# `moe.routing_replay: old` (first-minibatch expert flips over (token, layer) within a noise
# floor, in float32 and bf16; replay's step-time overhead), then one summary table; exit 1 when
# any part fails. One GPU (the first of CUDA_VISIBLE_DEVICES), no hub access, no vLLM, no
# DeepSpeed: the summary lists what this machine cannot check (docs/vllm.md). Stopped at 540 s,
# the wheel installation included.
#
# The run must carry `.whl`: the lent machine has no package registry, so fetch the wheels first
# where there is one, `make gpu-wheels` (it prints their MiB against the 64 MiB carry), and give
# the device run `carry: [".whl"]`. Without them it stops at once (exit 2) saying so.
# scripts/gpu_run.sh's header says what is installed, and where (a temporary --target folder).
#
# Usage: scripts/gpu_check.sh [--output-dir runs/gpu-check]
#        scripts/gpu_check.sh --dry-run     # CPU, tiny models, through the same installation
GPU_RUN_TIMEOUT=${GPU_RUN_TIMEOUT:-540} exec "$(dirname "$0")/gpu_run.sh" gpu_check.py "$@"
