#!/usr/bin/env bash
# GPU smoke test: real GSPO (bf16, gradient checkpointing; full fine-tuning, LoRA, and plain
# GRPOTrainer for the step-time ratio) on a locally built 0.44B Qwen3-shaped model, with
# measured peak memory and step time beside `gspo-trl plan`'s prediction. One GPU, < 8 min,
# no hub access, no vLLM, no DeepSpeed.
#
# Needs on the GPU machine: python with torch (CUDA), transformers, accelerate, peft. The rest
# travels as wheels in .whl/ (gitignored), filled beforehand on a machine with internet, for
# the GPU machine's python version (here 3.11) - pure-python or manylinux wheels, no deps:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.11 \
#       --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d .whl \
#       trl==1.16.0 datasets==5.2.0 pyarrow==26.0.1 dill==0.4.1 multiprocess==0.70.19 \
#       xxhash==4.1.0 pandas==3.1.1 math-verify==0.9.0 latex2sympy2_extended==1.11.0 \
#       antlr4-python3-runtime==4.13.2 psutil
#
# Each wheel is installed only when its distribution is missing, so the machine's own torch,
# numpy and transformers are never replaced.
#
# Usage: scripts/gpu_smoke.sh [--steps 8] [--batch 8] [--completion 512] [--output-dir DIR]
#        scripts/gpu_smoke.sh --dry-run     # CPU, tiny model, 1 step: checks the wiring only
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
WHEELS=${WHEELS:-.whl}

if [ -d "$WHEELS" ]; then
    for wheel in "$WHEELS"/*.whl; do
        [ -e "$wheel" ] || continue
        dist=$(basename "$wheel" | cut -d- -f1)
        if ! "$PYTHON" -m pip show -q "$dist" >/dev/null 2>&1; then
            "$PYTHON" -m pip install -q --no-index --no-deps "$wheel"
        fi
    done
fi
"$PYTHON" -c "import trl, datasets, math_verify, peft" || {
    echo "gpu_smoke.sh: trl, datasets, math-verify or peft missing; fill $WHEELS (see this script's header)" >&2
    exit 2
}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec timeout 480 "$PYTHON" scripts/gpu_smoke.py "$@"
