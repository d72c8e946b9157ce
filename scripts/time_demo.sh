#!/usr/bin/env bash
# `make demo` timed as a user meets it: N first runs (no warm-start cache: a fresh clone
# right after the install) and N repeats (the warm start cached in runs/demo/warm-start).
# Prints each run's wall time and held-out scores, then one summary line: the line README.md
# quotes (tests/test_readme.py checks the README's line has this shape). Deletes runs/demo first.
#   scripts/time_demo.sh [N]     (default 3)
#   BUSY=1 scripts/time_demo.sh  (the same with one CPU-bound process running beside it)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
make -s .venv/.installed-base >/dev/null
out=$(mktemp -d)
spinner=""
if [ -n "${BUSY:-}" ]; then
  python3 -c "while True: pass" & spinner=$!
  trap 'kill $spinner 2>/dev/null || true' EXIT
fi
measure() {  # $1: label; prints "label seconds before after"
  local start end
  start=$(date +%s.%N)
  make -s demo >"$out/log" 2>&1 || { tail -20 "$out/log"; exit 1; }
  end=$(date +%s.%N)
  python3 - "$1" "$start" "$end" <<'PY'
import json, sys
label, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
r = json.load(open("runs/demo/results.json"))
print(f"{label} {end - start:.1f} {r['heldout_accuracy_before']:.3f} {r['heldout_accuracy_after']:.3f}")
PY
}
for _ in $(seq "$runs"); do rm -rf runs/demo; measure first; done | tee "$out/first"
for _ in $(seq "$runs"); do measure repeat; done | tee "$out/repeat"
python3 scripts/time_demo_summary.py "$out/first" "$out/repeat" ${BUSY:+--busy}
