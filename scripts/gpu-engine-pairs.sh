#!/usr/bin/env bash
# Step time (issue 7): PAIRS alternating native / gpumem runs of bench/gpu/train.py's workloads (WORKLOADS,
# "name:steps" each, default "lm:80 vit:40") at the default configuration, so drift on a shared GPU hits both
# sides alike. Prints per pair the ratio of step-time sums gpumem / native (all steps, after the 1st, after
# the 5th), the median steps, reserved/live of both, and where the difference after the 1st step lies: the ms
# gpumem spent in driver calls in those steps, and the ratio over the steps without any driver call (what is
# left there is host cost and noise). Then gpumem's driver calls per kind (calls, ms).
#   On the device: run(command="bash scripts/gpu-engine-pairs.sh", carry=[".device/gpu"])
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.device/gpu}
OUT=${OUT:-gpu-pairs-out}
PAIRS=${PAIRS:-3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for i in $(seq "$PAIRS"); do
  for w in ${WORKLOADS:-lm:80 vit:40}; do
    set -- ${w/:/ }
    timeout 300 python3 bench/gpu/train.py "$1" --steps "$2" --out "$OUT/${1}_native$i.json" > "$OUT/${1}_native$i.log" 2>&1
    timeout 300 "$BIN/gpumem" run -q -- python3 bench/gpu/train.py "$1" --steps "$2" --out "$OUT/${1}_gpumem$i.json" \
      > "$OUT/${1}_gpumem$i.log" 2>&1
  done
done
python3 - "$OUT" "$PAIRS" ${WORKLOADS:-lm:80 vit:40} <<'PY'
import json, sys
out, pairs, workloads = sys.argv[1], int(sys.argv[2]), [w.split(":")[0] for w in sys.argv[3:]]
def median(s): return sorted(s)[len(s) // 2]
print("| workload | pair | all steps | after the 1st | after the 5th | median native / gpumem | reserved/live native / gpumem "
      "| after the 1st: gpumem - native / in driver calls | steps without driver calls: ratio (n) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for w in workloads:
    for i in range(1, pairs + 1):
        try:
            n, g = (json.load(open(f"{out}/{w}_{k}{i}.json")) for k in ("native", "gpumem"))
        except (OSError, ValueError):
            print(f"| {w} | {i} | failed |"); continue
        a, b, d = n["step_ms"], g["step_ms"], g.get("driver_ms")
        quiet = [k for k in range(1, min(len(a), len(b))) if d and d[k] < 0.05]
        q = f"{sum(b[k] for k in quiet) / sum(a[k] for k in quiet):.3f} ({len(quiet)})" if quiet else "- (0)"
        in_driver = f"{sum(d[1:]):.1f}" if d else "- (not recorded)"
        print(f"| {w} | {i} | {sum(b) / sum(a):.3f} | {sum(b[1:]) / sum(a[1:]):.3f} | {sum(b[5:]) / sum(a[5:]):.3f} | "
              f"{median(a):.1f} / {median(b):.1f} ms | {n['peak_reserved'] / n['peak_live']:.4f} / "
              f"{g['peak_reserved'] / g['peak_live']:.4f} | {sum(b[1:]) - sum(a[1:]):+.1f} / {in_driver} ms | {q} |")
        dr = g.get("driver") or {}
        print("    driver: " + ", ".join(f"{k} {dr.get(k + '.calls', 0)} / {dr.get(k + '.us', 0) / 1e3:.1f} ms"
                                       for k in ("create", "map", "access", "unmap", "release", "sync")))
PY
