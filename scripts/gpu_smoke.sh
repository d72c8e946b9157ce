#!/usr/bin/env bash
# GPU smoke test (part of scripts/gpu_check.sh): real GSPO (bf16, gradient checkpointing; full
# fine-tuning, LoRA, and plain GRPOTrainer for the step-time ratio) on a locally built 0.44B Qwen3-shaped model, with
# measured peak memory and step time beside `gspo-trl plan`'s prediction. One GPU, < 8 min,
# no hub access, no vLLM, no DeepSpeed. What the GPU machine needs (wheels in .whl/): the header
# of scripts/gpu_run.sh.
#
# Usage: scripts/gpu_smoke.sh [--steps 8] [--batch 8] [--completion 512] [--output-dir DIR]
#        scripts/gpu_smoke.sh --dry-run     # CPU, tiny model, 1 step: checks the wiring only
# A --dry-run installs the wheels too (`make gpu-wheels`); GPU_RUN_NO_WHEELS=1 uses this Python's own.
exec "$(dirname "$0")/gpu_run.sh" gpu_smoke.py "$@"
