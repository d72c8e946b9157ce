#!/usr/bin/env bash
# Runs one of the one-GPU scripts (scripts/gpu_check.py, gpu_smoke.py, gpu_bench.py,
# gpu_moe_replay.py) on a GPU machine with no hub access, no vLLM and no DeepSpeed; the
# gpu_*.sh wrappers call it. Whatever the script does, it is stopped at GPU_RUN_TIMEOUT seconds
# (480 unless the wrapper says otherwise).
#
# The machine: python3 (3.12) with torch (CUDA), transformers (< 5.18), accelerate and peft, and
# numpy, pandas, pyarrow, xxhash, psutil, matplotlib, pyyaml already there, as on the H200 lent
# to this project (its image lists them). The rest travels as wheels in .whl/ (gitignored),
# downloaded beforehand on a machine with internet for CPython 3.12 (multiprocess ships one
# wheel per Python version; the others are pure Python), without their dependencies:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
#       trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 math-verify==0.9.0 \
#       latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
#
# Each wheel is installed only when its distribution is missing, so the machine's own torch,
# numpy, pandas, pyarrow and transformers are never replaced; then `pip check` must find nothing
# wrong with what this project needs (a conflict elsewhere on the machine is printed, not fatal).
#
# GPUs: the scripts train on one GPU in one process (gspo_trl refuses n_gpu > 1 without a
# launcher). On a node with several, the first of CUDA_VISIBLE_DEVICES (or GPU 0) is used.
#
# Usage: scripts/gpu_run.sh SCRIPT.py [ARGS...]
set -euo pipefail
script=$1
shift
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
NEEDED="trl datasets math-verify latex2sympy2_extended antlr4-python3-runtime peft transformers accelerate"

if ! command -v "$PYTHON" >/dev/null; then
    echo "${script%.py}: no $PYTHON on PATH; set PYTHON=/path/to/python3" >&2
    exit 2
fi
if [ -d "$WHEELS" ]; then
    for wheel in "$WHEELS"/*.whl; do
        [ -e "$wheel" ] || continue
        dist=$(basename "$wheel" | cut -d- -f1)
        if ! "$PYTHON" -m pip show -q "$dist" >/dev/null 2>&1; then
            "$PYTHON" -m pip install -q --no-index --no-deps --no-compile "$wheel"
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
conflicts=$("$PYTHON" -m pip check 2>&1 || true)
ours=$(printf '%s\n' "$conflicts" | grep -i -E "^($(echo "$NEEDED" | tr ' ' '|'))[ =]" || true)
if [ -n "$ours" ]; then
    printf '%s: pip check: %s\n' "${script%.py}" "$ours" >&2
    exit 2
fi
if [ -n "$conflicts" ] && ! printf '%s' "$conflicts" | grep -q "No broken requirements"; then
    printf '%s: pip check (other packages, not needed here):\n%s\n' "${script%.py}" "$conflicts" >&2
fi
if [[ "$*" != *--dry-run* ]]; then
    first=${CUDA_VISIBLE_DEVICES:-0}
    first=${first%%,*}
    if [ "${CUDA_VISIBLE_DEVICES:-}" != "$first" ]; then
        echo "${script%.py}: one GPU: CUDA_VISIBLE_DEVICES=$first (was '${CUDA_VISIBLE_DEVICES:-unset}')" >&2
    fi
    export CUDA_VISIBLE_DEVICES=$first
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
exec timeout "${GPU_RUN_TIMEOUT:-480}" "$PYTHON" "scripts/$script" "$@"
