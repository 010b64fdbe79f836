#!/usr/bin/env bash
# Engine figures on the GPU (issue 7), side by side in one run: each workload of bench/gpu/train.py natively
# and under gpumem at each physical page size of PAGES, then under --limit 1.02x the peak live bytes; the
# seeds' empty_cache example; two processes with a limit each. Prints one table.
#   On the device: run(command="bash scripts/gpu-engine-check.sh", carry=[".device/gpu"])
#   WORKLOADS (default "lm resnet vit generate"), PAGES (large page in MiB, default "2 16"; the first run's
#   peak live sets the limits), LIMIT_PAGE (MiB for the limit and two-process runs; default: none set, so
#   gpumem's own choice under a limit), TWO_PROCESSES=0 leaves out the two-process run, OUT (default
#   ./gpu-engine-out).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.device/gpu}
OUT=${OUT:-gpu-engine-out}
WORKLOADS=${WORKLOADS:-lm resnet vit generate}
PAGES=${PAGES:-2 16}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
first_page=${PAGES%% *}
limit_env=(${LIMIT_PAGE:+GPUMEM_CUDA_PAGE_MIB=$LIMIT_PAGE})
run() {  # label, timeout, command...
  local label=$1 limit=$2
  shift 2
  echo "== $label"
  timeout "$limit" "$@" > "$OUT/$label.log" 2>&1
  local rc=$?
  ((rc == 0)) || { echo "   exit $rc:"; tail -3 "$OUT/$label.log"; }
  echo "$rc" > "$OUT/$label.rc"
}
for w in $WORKLOADS; do
  run "${w}_native" 300 python3 bench/gpu/train.py "$w" --out "$OUT/${w}_native.json"
  for p in $PAGES; do
    run "${w}_page$p" 300 env GPUMEM_CUDA_PAGE_MIB="$p" "$BIN/gpumem" run -q -- python3 bench/gpu/train.py "$w" --out "$OUT/${w}_page$p.json"
  done
  if [[ -f $OUT/${w}_page$first_page.json ]]; then
    limit=$(python3 -c "import json; print(int(json.load(open('$OUT/${w}_page$first_page.json'))['peak_live'] * 1.02))")
    run "${w}_limit" 300 env "${limit_env[@]}" "$BIN/gpumem" run -q --limit "$limit" -- python3 bench/gpu/train.py "$w" --out "$OUT/${w}_limit.json"
  fi
done
# Kernels over memory from small vs large physical pages, no allocation timed.
if [[ ${PAGE_COST:-1} != 0 ]]; then
  echo "page cost, native: $(python3 bench/gpu/page_cost.py 2>&1 | tail -1)"
  for p in $PAGES; do
    echo "page cost, $p MiB: $(GPUMEM_CUDA_PAGE_MIB=$p "$BIN/gpumem" run -q -- python3 bench/gpu/page_cost.py 2>&1 | tail -1)"
  done
fi
# The seeds' example: two 400,000,000-byte tensors, the first deleted, empty_cache().
cat > "$OUT/seeds.py" <<'PY'
import torch
a = torch.empty(400_000_000, dtype=torch.uint8, device="cuda"); b = torch.empty(400_000_000, dtype=torch.uint8, device="cuda")
b.fill_(7); del a; torch.cuda.empty_cache()
print(f"reserved after empty_cache: {torch.cuda.memory_reserved() / 2**20:.0f} MiB; b intact: {bool((b == 7).all())}")
PY
for p in $PAGES; do
  echo "seeds example, native: $(python3 "$OUT/seeds.py" 2>&1 | tail -1)"
  echo "seeds example, gpumem $p MiB pages: $(GPUMEM_CUDA_PAGE_MIB=$p "$BIN/gpumem" run -q -- python3 "$OUT/seeds.py" 2>&1 | tail -1)"
done
if [[ ${TWO_PROCESSES:-1} != 0 ]]; then
  L=$((8 << 30))
  for s in 1 2; do
    env "${limit_env[@]}" timeout 300 "$BIN/gpumem" run -q --limit 8GiB -- python3 bench/gpu/limit_worker.py $L $s > "$OUT/proc$s.json" 2> "$OUT/proc$s.err" &
  done
  wait
  for s in 1 2; do echo "two processes, --limit 8GiB, ${LIMIT_PAGE:-default} pages, #$s: $(cat "$OUT/proc$s.json") $(tail -1 "$OUT/proc$s.err")"; done
fi
python3 - "$OUT" "$WORKLOADS" "$PAGES" <<'PY'
import json, os, sys
out, workloads, pages = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def load(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except (OSError, ValueError):
        return None
print("\nTime ratio: gpumem / native step time summed over all steps (after the first step in brackets).")
print("| workload | native ms (sum) | reserved/live native | " + " | ".join(
    f"{p} MiB: time ratio, reserved/live" for p in pages) + " | --limit 1.02x: time ratio |")
print("|" + " --- |" * (4 + len(pages)))
for w in workloads:
    n = load(f"{w}_native")
    if not n:
        print(f"| {w} | failed |"); continue
    cells = []
    for p in pages:
        g = load(f"{w}_page{p}")
        if not g:
            cells.append("failed"); continue
        diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(n["losses"], g["losses"]))
        cells.append(f"{sum(g['step_ms']) / sum(n['step_ms']):.4f} ({sum(g['step_ms'][1:]) / sum(n['step_ms'][1:]):.4f}),"
                     f" {g['peak_reserved'] / g['peak_live']:.4f}"
                     + ("" if diff <= 1e-2 else f" (loss diff {diff:.1e})"))
    for name in [f"{w}_native"] + [f"{w}_page{p}" for p in pages] + [f"{w}_limit"]:
        r = load(name)
        if r:
            s = sorted(r["step_ms"])
            print(f"  {name}: first step {r['step_ms'][0]:.0f} ms, the rest {sum(r['step_ms'][1:]):.0f} ms, median {s[len(s) // 2]:.1f} ms")
            d = r.get("driver") or {}
            if d:  # where the allocator's own time went: driver calls per kind, calls / milliseconds
                print("    driver: " + ", ".join(f"{k} {d.get(k + '.calls', 0)} / {d.get(k + '.us', 0) / 1e3:.1f} ms"
                                               for k in ("create", "map", "access", "unmap", "release", "sync")))
    lim = load(f"{w}_limit")
    print(f"| {w} | {sum(n['step_ms']):.0f} | {n['peak_reserved'] / n['peak_live']:.4f} | " + " | ".join(cells)
          + (f" | completed, {sum(lim['step_ms']) / sum(n['step_ms']):.4f} ({sum(lim['step_ms'][1:]) / sum(n['step_ms'][1:]):.4f}) |"
             if lim else " | FAILED |"))
PY
