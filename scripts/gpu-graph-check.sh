#!/usr/bin/env bash
# CUDA graphs and memory pools under gpumem, on the GPU machine: every check of bench/gpu/graph_checks.py in
# a fresh process, natively and under `gpumem run`, side by side. Needs the binaries of
# `scripts/gpu-check.sh --prepare` in .device/gpu (carry it). Prints a table; exit 1 if a check that passes
# natively fails under gpumem. Logs in $OUT (default ./gpu-check-out)/graph-checks/.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.device/gpu}
LOGS=${OUT:-$PWD/gpu-check-out}/graph-checks
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
checks=$(python3 bench/gpu/graph_checks.py --list) || exit 1
for c in $checks; do  # all at once: each is small, the compile checks are CPU-bound
  (timeout 300 python3 bench/gpu/graph_checks.py "$c" >"$LOGS/$c.native" 2>&1; echo $? >"$LOGS/$c.native.rc") &
  (timeout 300 "$BIN/gpumem" run -- python3 bench/gpu/graph_checks.py "$c" >"$LOGS/$c.gpumem" 2>&1
   echo $? >"$LOGS/$c.gpumem.rc") &
done
wait
regressions=0
printf '%-36s %-8s %-8s %s\n' check native gpumem detail
for c in $checks; do
  n=$( [[ $(cat "$LOGS/$c.native.rc") == 0 ]] && echo PASS || echo FAIL )
  g=$( [[ $(cat "$LOGS/$c.gpumem.rc") == 0 ]] && echo PASS || echo FAIL )
  detail=$(grep -h -E "^(PASS|FAIL) $c" "$LOGS/$c.gpumem" | head -1 | cut -d: -f2-)
  [[ -z $detail ]] && detail=" $(tail -1 "$LOGS/$c.gpumem" | cut -c1-150)"
  printf '%-36s %-8s %-8s%s\n' "$c" "$n" "$g" "$detail"
  [[ $n == PASS && $g != PASS ]] && regressions=$((regressions + 1))
done
echo "graph checks: $regressions regression(s) under gpumem"
((regressions == 0))
