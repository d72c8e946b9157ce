#!/usr/bin/env bash
# Runs one of the one-GPU scripts (scripts/gpu_smoke.py, scripts/gpu_bench.py) on a GPU machine
# with no hub access, no vLLM and no DeepSpeed; gpu_smoke.sh and gpu_bench.sh call it. Whatever
# the script does, it is stopped at 480 s.
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
# Usage: scripts/gpu_run.sh SCRIPT.py [ARGS...]
set -euo pipefail
script=$1
shift
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
# find_spec, not import: says what is missing without paying for torch's import twice
"$PYTHON" -c "
import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in ('trl', 'datasets', 'math_verify', 'peft')))
" || {
    echo "${script%.py}: trl, datasets, math-verify or peft missing; fill $WHEELS (see scripts/gpu_run.sh's header)" >&2
    exit 2
}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec timeout 480 "$PYTHON" "scripts/$script" "$@"
