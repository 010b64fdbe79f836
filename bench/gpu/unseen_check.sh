#!/usr/bin/env bash
# Runs workloads of bench/gpu/record_workloads.py natively, under `gpumem run` and under `gpumem run --limit`
# 1.02x native's peak allocated bytes, each in a fresh process, and prints one line per run: peaks,
# reserved / allocated, time, and the training losses (count, sum, last) with the sum's relative difference
# from native's. A run whose program exits non-zero, or in which a thread died (a threaded workload's main
# thread goes on: "Exception in thread"), counts as failed and its error is printed.
# Usage (GPU machine): bench/gpu/unseen_check.sh GPUMEM_BINARY NAME...
# Exit: 0 every run completed, 1 a run failed (its output tail is printed), 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] && [ -x "$1" ] || { echo "usage: $0 GPUMEM_BINARY NAME..." >&2; exit 2; }
bin=$1; shift
fails=0
sum_of() { grep -oE 'losses [0-9]+ sum [-0-9.e+]+' <<<"$1" | tail -1 | awk '{print $4}'; }
run() {  # label, command...
  local label=$1; shift
  local out rc line s died
  out=$("$@" 2>&1); rc=$?
  died=$(grep -c '^Exception in thread' <<<"$out")
  if [ "$rc" -eq 0 ] && [ "$died" -eq 0 ]; then
    line=$(grep -E '^[a-z0-9_]+: peak allocated' <<<"$out" | tail -1 | sed 's/^[a-z0-9_]*: //')
    s=$(sum_of "$out")
    if [ -n "${NATIVE_SUM:-}" ] && [ -n "$s" ]; then
      line+=$(python3 -c "a, b = float('$NATIVE_SUM'), float('$s'); print(f', sum vs native {abs(b - a) / max(abs(a), 1e-30):.2e} relative')")
    fi
    echo "$label: $line"
  elif [ "$rc" -eq 0 ]; then
    echo "$label: FAILED ($died thread(s) died)"
    grep -E '^[A-Za-z_.]*(Error|Exception): ' <<<"$out" | head -2 | cut -c1-300 | sed 's/^/    /'; fails=$((fails + 1))
  else
    echo "$label: FAILED (exit $rc)"; tail -5 <<<"$out" | sed 's/^/    /'; fails=$((fails + 1))
  fi
  LAST=$out
}
for name in "$@"; do
  NATIVE_SUM=
  run "$name native" python3 bench/gpu/record_workloads.py "$name" -
  NATIVE_SUM=$(sum_of "$LAST")
  peak=$(grep -oE 'peak allocated [0-9]+' <<<"$LAST" | tail -1 | awk '{print $3}')
  run "$name gpumem" "$bin" run -q -- python3 bench/gpu/record_workloads.py "$name" -
  if [ -n "$peak" ]; then
    limit=$(python3 -c "print(int($peak * 1.02))")
    run "$name gpumem --limit 1.02x ($limit)" "$bin" run -q --limit "$limit" -- python3 bench/gpu/record_workloads.py "$name" -
  fi
done
exit $((fails > 0))
