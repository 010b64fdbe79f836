#!/usr/bin/env bash
# Runs workloads of bench/gpu/record_workloads.py natively, under `gpumem run` and under `gpumem run --limit`
# 1.02x native's peak allocated bytes, each in a fresh process, and prints one line per run: peaks,
# reserved / allocated, time, and the training losses (count, sum, last) to compare with native's.
# Usage (GPU machine): bench/gpu/unseen_check.sh GPUMEM_BINARY NAME...
# Exit: 0 every run completed, 1 a run failed (its output tail is printed), 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] && [ -x "$1" ] || { echo "usage: $0 GPUMEM_BINARY NAME..." >&2; exit 2; }
bin=$1; shift
fails=0
run() {  # label, command...
  local label=$1; shift
  local out
  if out=$("$@" 2>&1); then
    echo "$label: $(grep -E '^[a-z0-9_]+: peak allocated' <<<"$out" | tail -1 | sed 's/^[a-z0-9_]*: //')"
  else
    echo "$label: FAILED (exit $?)"; tail -5 <<<"$out" | sed 's/^/    /'; fails=$((fails + 1))
  fi
  LAST=$out
}
for name in "$@"; do
  run "$name native" python3 bench/gpu/record_workloads.py "$name" -
  peak=$(grep -oE 'peak allocated [0-9]+' <<<"$LAST" | tail -1 | awk '{print $3}')
  run "$name gpumem" "$bin" run -q -- python3 bench/gpu/record_workloads.py "$name" -
  if [ -n "$peak" ]; then
    limit=$(python3 -c "print(int($peak * 1.02))")
    run "$name gpumem --limit 1.02x ($limit)" "$bin" run -q --limit "$limit" -- python3 bench/gpu/record_workloads.py "$name" -
  fi
done
exit $((fails > 0))
