#!/usr/bin/env bash
# Proof of `gpumem exporter` on a real GPU (run by gpu-check-monitor.sh, or alone; not part of `make test`).
#  1. /metrics against nvidia-smi and `gpumem query` read at the same moment: FB used / free / reserved
#     (MiB) per GPU, and with a PyTorch process holding 1 GiB, its per-process series against
#     nvidia-smi --query-compute-apps.
#  2. Scrape cost: median and p99 of 300 keep-alive scrapes (target <= 5 ms), and the exporter's CPU
#     over CPU_S seconds at one sample a second (target <= 1 % of a core).
# Prints PASS/FAIL lines and numbers; exit 1 when anything fails.
# Usage: scripts/gpu-check-exporter.sh [path/to/gpumem]
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-find-gpumem.sh
find_gpumem gpu-check-exporter "${1:-}"
OUTDIR=${OUT:-/tmp/gpumem-exporter-check}
CPU_S=${CPU_S:-30}
mkdir -p "$OUTDIR"
FAILS=0
result() { if [[ "$1" == PASS ]]; then echo "PASS $2"; else echo "FAIL $2"; FAILS=$((FAILS+1)); fi; }

"$BIN" exporter --listen 127.0.0.1:0 --interval 1 --json > "$OUTDIR/exporter.out" 2> "$OUTDIR/exporter.err" &
EXP=$!
TORCH=""
cleanup() { kill "$EXP" 2>/dev/null; [[ -n "$TORCH" ]] && kill "$TORCH" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
for _ in $(seq 50); do [[ -s "$OUTDIR/exporter.out" ]] && break; sleep 0.1; done
PORT=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$OUTDIR/exporter.out" 2>/dev/null)
[[ -n "$PORT" ]] || { echo "FAIL exporter did not start: $(cat "$OUTDIR/exporter.err")"; exit 1; }
URL=http://127.0.0.1:$PORT
for _ in $(seq 50); do python3 -c "import urllib.request as u; u.urlopen('$URL/healthz')" 2>/dev/null && break; sleep 0.1; done

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 -c 'import torch, time; x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); print("ready", flush=True); time.sleep(120)' > "$OUTDIR/torch.out" 2>&1 &
  TORCH=$!
  for _ in $(seq 300); do grep -q ready "$OUTDIR/torch.out" && break; sleep 0.1; done
fi
sleep 2.5  # two samples later: the exporter has seen the process

# 1. The same moment: one sample of the exporter is at most --interval old, so read it right after
#    the tools and compare; memory does not move while the GPU is otherwise idle.
nvidia-smi --query-gpu=index,memory.used,memory.free,memory.reserved --format=csv,noheader,nounits > "$OUTDIR/smi.csv"
"$BIN" query --query-gpu=index,memory.used,memory.free,memory.reserved --format=csv,noheader,nounits > "$OUTDIR/query.csv"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > "$OUTDIR/smi-apps.csv"
sleep 1.2
python3 -c "import urllib.request as u; open('$OUTDIR/metrics.txt','wb').write(u.urlopen('$URL/metrics').read())"
python3 - "$OUTDIR" <<'PY' > "$OUTDIR/compare.txt"
import re, sys
out = sys.argv[1]
metrics = {}
for line in open(f"{out}/metrics.txt"):
    m = re.match(r'(\w+)\{(.*)\} (\S+)$', line.strip())
    if m:
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        metrics.setdefault(m.group(1), []).append((labels, float(m.group(3))))
def series(name, **want):
    return [v for l, v in metrics.get(name, []) if all(l.get(k) == str(w) for k, w in want.items())]
for tool in ("smi", "query"):
    for row in open(f"{out}/{tool}.csv"):
        idx, used, free, reserved = [c.strip() for c in row.split(",")]
        for name, val in (("USED", used), ("FREE", free), ("RESERVED", reserved)):
            got = series(f"DCGM_FI_DEV_FB_{name}", gpu=idx)
            ok = got and val.isdigit() and abs(got[0] - int(val)) <= 0
            print(f"{'PASS' if ok else 'FAIL'} GPU {idx} FB_{name}: exporter {got[0] if got else '-'} MiB, {tool} {val} MiB")
for row in open(f"{out}/smi-apps.csv"):
    if not row.strip(): continue
    pid, used = [c.strip() for c in row.split(",")]
    got = series("gpumem_process_gpu_memory_bytes", pid=pid)
    mib = round(sum(got) / 2**20) if got else None
    ok = mib is not None and used.isdigit() and mib == int(used)
    print(f"{'PASS' if ok else 'FAIL'} process {pid}: exporter {mib} MiB, nvidia-smi {used} MiB")
PY
cat "$OUTDIR/compare.txt"
FAILS=$((FAILS + $(grep -c '^FAIL' "$OUTDIR/compare.txt")))
if command -v promtool >/dev/null; then
  promtool check metrics < "$OUTDIR/metrics.txt" > "$OUTDIR/promtool.txt" 2>&1; rc=$?
  if [[ $rc == 0 || ( $rc == 3 && -z "$(grep -v '^DCGM_FI_' "$OUTDIR/promtool.txt")" ) ]]; then
    result PASS "promtool check metrics (findings only on dcgm-exporter's own names)"
  else result FAIL "promtool check metrics: $(head -3 "$OUTDIR/promtool.txt")"; fi
fi

# 2. Scrape cost and CPU.
python3 - "$PORT" <<'PY' > "$OUTDIR/scrape.txt"
import http.client, statistics, sys, time
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
t = []
for _ in range(300):
    s = time.perf_counter(); c.request("GET", "/metrics"); body = c.getresponse().read(); t.append((time.perf_counter() - s) * 1e3)
t.sort()
print(f"scrape_ms median={statistics.median(t):.3f} p99={t[int(len(t)*0.99)-1]:.3f} bytes={len(body)}")
PY
read -r MED P99 < <(awk '{split($2,a,"="); split($3,b,"="); print a[2], b[2]}' "$OUTDIR/scrape.txt")
cat "$OUTDIR/scrape.txt"
if awk "BEGIN{exit !($MED <= 5)}"; then result PASS "scrape median $MED ms (p99 $P99 ms) <= 5 ms"; else result FAIL "scrape median $MED ms > 5 ms"; fi
ticks() { awk '{print $14 + $15}' "/proc/$EXP/stat"; }
T0=$(ticks); sleep "$CPU_S"; T1=$(ticks)
PCT=$(awk -v a="$T0" -v b="$T1" -v hz="$(getconf CLK_TCK)" -v s="$CPU_S" 'BEGIN{printf "%.2f", (b-a)/hz/s*100}')
if awk "BEGIN{exit !($PCT <= 1)}"; then result PASS "exporter CPU $PCT % of a core at 1 sample/s"; else result FAIL "exporter CPU $PCT % of a core > 1 %"; fi
echo "exporter failures: $FAILS"
exit $((FAILS > 0))
