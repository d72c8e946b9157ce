#!/usr/bin/env bash
# `make demo` timed as a user meets it: N first runs (no warm-start cache: a fresh clone
# right after the install) and N repeats (the warm start cached in runs/demo/warm-start).
# Prints each run's wall time and held-out gain, then the medians. Deletes runs/demo first.
#   scripts/time_demo.sh [N]     (default 3; ~2 min per first run, ~30 s per repeat on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
make -s .venv/.installed-base >/dev/null
out=$(mktemp -d)
measure() {  # $1: label; prints "label seconds gain"
  local start end
  start=$(date +%s.%N)
  make -s demo >"$out/log" 2>&1 || { tail -20 "$out/log"; exit 1; }
  end=$(date +%s.%N)
  python3 - "$1" "$start" "$end" <<'PY'
import json, sys
label, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
r = json.load(open("runs/demo/results.json"))
before, after = r["heldout_accuracy_before"], r["heldout_accuracy_after"]
print(f"{label} {end - start:.1f} s  held-out {before:.3f} -> {after:.3f} (+{after - before:.3f})")
PY
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
for _ in $(seq "$runs"); do rm -rf runs/demo; measure first; done | tee "$out/first"
for _ in $(seq "$runs"); do measure repeat; done | tee "$out/repeat"
echo "median first run: $(awk '{print $2}' "$out/first" | median) s;" \
     "median repeat: $(awk '{print $2}' "$out/repeat" | median) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
