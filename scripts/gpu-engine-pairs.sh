#!/usr/bin/env bash
# Steady-state step time (issue 7): PAIRS alternating native / gpumem runs of bench/gpu/train.py's LM (80
# steps) and ViT (40 steps) at the default configuration, so drift on a shared GPU hits both sides alike.
# Prints per pair the ratio of step-time sums gpumem / native (all steps, after the 1st, after the 5th),
# the median steps, reserved/live of both and gpumem's driver calls per kind (calls, ms).
#   On the device: run(command="bash scripts/gpu-engine-pairs.sh", carry=[".device/gpu"])
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.device/gpu}
OUT=${OUT:-gpu-pairs-out}
PAIRS=${PAIRS:-3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for i in $(seq "$PAIRS"); do
  for w in "lm 80" "vit 40"; do
    set -- $w
    timeout 300 python3 bench/gpu/train.py "$1" --steps "$2" --out "$OUT/${1}_native$i.json" > "$OUT/${1}_native$i.log" 2>&1
    timeout 300 "$BIN/gpumem" run -q -- python3 bench/gpu/train.py "$1" --steps "$2" --out "$OUT/${1}_gpumem$i.json" \
      > "$OUT/${1}_gpumem$i.log" 2>&1
  done
done
python3 - "$OUT" "$PAIRS" <<'PY'
import json, sys
out, pairs = sys.argv[1], int(sys.argv[2])
def median(s): return sorted(s)[len(s) // 2]
print("| workload | pair | all steps | after the 1st | after the 5th | median native / gpumem | reserved/live native / gpumem |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for w in ("lm", "vit"):
    for i in range(1, pairs + 1):
        try:
            n, g = (json.load(open(f"{out}/{w}_{k}{i}.json")) for k in ("native", "gpumem"))
        except (OSError, ValueError):
            print(f"| {w} | {i} | failed |"); continue
        a, b = n["step_ms"], g["step_ms"]
        print(f"| {w} | {i} | {sum(b) / sum(a):.3f} | {sum(b[1:]) / sum(a[1:]):.3f} | {sum(b[5:]) / sum(a[5:]):.3f} | "
              f"{median(a):.1f} / {median(b):.1f} ms | {n['peak_reserved'] / n['peak_live']:.4f} / "
              f"{g['peak_reserved'] / g['peak_live']:.4f} |")
        d = g.get("driver") or {}
        print("    driver: " + ", ".join(f"{k} {d.get(k + '.calls', 0)} / {d.get(k + '.us', 0) / 1e3:.1f} ms"
                                       for k in ("create", "map", "access", "unmap")))
PY
