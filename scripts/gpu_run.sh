#!/usr/bin/env bash
# Runs one of the one-GPU scripts (scripts/gpu_check.py, gpu_smoke.py, gpu_bench.py,
# gpu_moe_replay.py) on a GPU machine with no hub access, no vLLM and no DeepSpeed; the
# gpu_*.sh wrappers call it. Whatever the script does, it is stopped at GPU_RUN_TIMEOUT seconds
# (480 unless the wrapper says otherwise), installation included.
#
# The machine lent to this project: Python 3.12.3 with torch 2.11.0+cu130, transformers 5.17,
# accelerate 1.15 and peft, and no package registry at all. What else the scripts need travels
# as wheels in .whl/ (git-ignored), fetched beforehand on a machine with a registry by
#
#   make gpu-wheels      # scripts/gpu_wheels.txt, cp312 / pure Python, no deps; prints the MiB
#
# and carried with the working tree (the device tool's `carry: [".whl"]`). Here the wheels the
# machine lacks, or has at a version trl, datasets or math-verify refuse, are installed by
# scripts/gpu_wheels.py into a temporary `pip install --target` folder put first on PYTHONPATH:
# the image's site-packages is never written, and its torch, numpy and transformers never
# replaced. Its pyarrow and fsspec versions are printed first (datasets pins both). Then
# `pip check` must find nothing wrong with what this project needs (a conflict elsewhere on the
# machine is printed, not fatal). With no wheels and trl, datasets or math-verify missing, it
# stops at once (exit 2) and says to run `make gpu-wheels`.
#
# --dry-run (CPU, whose Python has everything already) takes the same path, installing every
# carried wheel this Python can load into the --target folder, so a dry run proves the install;
# it too stops without wheels unless GPU_RUN_NO_WHEELS=1 (CI, which does not fetch 58 MiB).
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
tool=${script%.py}
dry_run=0
[[ " $* " == *" --dry-run "* ]] && dry_run=1

if ! command -v "$PYTHON" >/dev/null; then
    echo "$tool: no $PYTHON on PATH; set PYTHON=/path/to/python3" >&2
    exit 2
fi
target=$(mktemp -d "${TMPDIR:-/tmp}/gpu-wheels.XXXXXX")
trap 'rm -rf "$target"' EXIT
started=$SECONDS
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    all=()
    [ "$dry_run" = 1 ] && all=(--all)
    "$PYTHON" scripts/gpu_wheels.py install "$WHEELS" "$target" "${all[@]}" || exit 2
elif [ "$dry_run" = 1 ] && [ "${GPU_RUN_NO_WHEELS:-0}" != 1 ]; then
    echo "$tool: no wheels in $WHEELS: run \`make gpu-wheels\` (the dry run installs them as the GPU run does)" >&2
    exit 2
fi
export PYTHONPATH="$target:$PWD${PYTHONPATH:+:$PYTHONPATH}"
# find_spec, not import: says what is missing without paying for torch's import twice
"$PYTHON" -c "
import importlib.util, sys
missing = [m for m in ('trl', 'datasets', 'math_verify', 'peft') if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(', '.join(missing))
print('$tool: trl from', importlib.util.find_spec('trl').origin.rsplit('/trl/', 1)[0])
" || {
    echo "$tool: trl, datasets, math-verify or peft missing and no wheels in $WHEELS: run \`make gpu-wheels\` where there is a package registry and carry .whl (scripts/gpu_run.sh's header)" >&2
    exit 2
}
echo "$tool: installed in $((SECONDS - started)) s"
conflicts=$("$PYTHON" -m pip check 2>&1 || true)
ours=$(printf '%s\n' "$conflicts" | grep -i -E "^($(echo "$NEEDED" | tr ' ' '|'))[ =]" || true)
if [ -n "$ours" ]; then
    printf '%s: pip check: %s\n' "$tool" "$ours" >&2
    exit 2
fi
if [ -n "$conflicts" ] && ! printf '%s' "$conflicts" | grep -q "No broken requirements"; then
    printf '%s: pip check (other packages, not needed here):\n%s\n' "$tool" "$conflicts" >&2
fi
if [ "$dry_run" = 0 ]; then
    first=${CUDA_VISIBLE_DEVICES:-0}
    first=${first%%,*}
    if [ "${CUDA_VISIBLE_DEVICES:-}" != "$first" ]; then
        echo "$tool: one GPU: CUDA_VISIBLE_DEVICES=$first (was '${CUDA_VISIBLE_DEVICES:-unset}')" >&2
    fi
    export CUDA_VISIBLE_DEVICES=$first
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# the installation counts against the cap: what is left of it goes to the script
left=$((${GPU_RUN_TIMEOUT:-480} - (SECONDS - started)))
status=0
timeout "$left" "$PYTHON" "scripts/$script" "$@" || status=$?
exit "$status"
