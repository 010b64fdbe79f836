#!/usr/bin/env bash
# Proof of the monitor commands on a real GPU (run through the device tool; not part of `make test`).
#  1. `gpumem query` prints what `nvidia-smi --query-gpu` prints, byte for byte, once the fields that
#     change between two calls (timestamp, temperature, utilization, power, current clocks) are masked.
#  2. With a PyTorch process holding memory: --query-compute-apps lists the same processes and memory,
#     and `gpumem ps` shows the same memory; a process holding /dev/nvidia0 without a context is flagged.
#  3. One-shot latency (median of N whole-process runs each, interleaved) and loop-mode CPU cost
#     (-lms 10 for LOOP_S seconds each, side by side, CPU time from wait4's rusage).
#  5. `gpumem exporter`: scripts/gpu-check-exporter.sh (metrics vs nvidia-smi and gpumem query, scrape cost).
#  6. Health fields (retired pages, dmon -s v / jpg ofa, top %SM, XID, remapped rows): scripts/gpu-check-health.sh.
# Usage: scripts/gpu-check-monitor.sh [path/to/gpumem]   (default: .device/mon/gpumem, build/gpumem)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-find-gpumem.sh
find_gpumem gpu-check-monitor "${1:-}"
OUTDIR=${OUT:-/tmp/gpumem-monitor-check}
mkdir -p "$OUTDIR"
N=${N:-30}
LOOP_S=${LOOP_S:-30}
FIELDS=timestamp,index,name,uuid,pci.bus_id,driver_version,pstate,temperature.gpu,utilization.gpu,utilization.memory,memory.total,memory.reserved,memory.used,memory.free,power.draw,power.limit,clocks.sm,clocks.mem,clocks.max.sm,fan.speed,persistence_mode,compute_mode
# 1-based columns of FIELDS that may change between two calls.
MASK="1 8 9 10 15 17 18"
FAILS=0
declare -a ROWS

mask() { awk -F', ' -v cols="$MASK" 'BEGIN{n=split(cols,c," ")} NR==1 && /^timestamp/ {print; next} {for(i=1;i<=n;i++) $c[i]="X"; print}' OFS=', '; }
row() { ROWS+=("$(printf '%-44s %s' "$1" "$2")"); }
check() {  # name, file-a, file-b
  if diff -u "$2" "$3" > "$OUTDIR/$1.diff"; then row "$1" "identical"; else row "$1" "DIFFERENT (see $1.diff)"; FAILS=$((FAILS+1)); cat "$OUTDIR/$1.diff"; fi
}

if [[ "${DIAGNOSE:-0}" == 1 ]]; then
  # Where one-shot and loop time goes: NVML init variants and the cost of each NVML call.
  python3 - "$BIN" <<'PY'
import ctypes, os, statistics, subprocess, sys, time
binary = sys.argv[1]
def med(cmd, n=15):
    v = []
    for _ in range(n):
        t = time.perf_counter(); subprocess.run(cmd, stdout=subprocess.DEVNULL); v.append(time.perf_counter() - t)
    return statistics.median(v) * 1000
init_code = '''
import ctypes, time, sys
t0 = time.perf_counter(); lib = ctypes.CDLL("libnvidia-ml.so.1"); t1 = time.perf_counter()
flags = int(sys.argv[1])
rc = lib.nvmlInitWithFlags(flags) if flags >= 0 else lib.nvmlInit_v2(); t2 = time.perf_counter()
h = ctypes.c_void_p(); lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)); t3 = time.perf_counter()
n = ctypes.create_string_buffer(96); lib.nvmlDeviceGetName(h, n, 96); t4 = time.perf_counter()
lib.nvmlShutdown(); t5 = time.perf_counter()
print("%.2f %.2f %.2f %.2f %.2f rc=%d" % ((t1-t0)*1e3, (t2-t1)*1e3, (t3-t2)*1e3, (t4-t3)*1e3, (t5-t4)*1e3, rc))
'''
for flags in (-1, 0, 2):
    rows = [subprocess.run([sys.executable, "-c", init_code, str(flags)], capture_output=True, text=True).stdout.split() for _ in range(7)]
    cols = list(zip(*[r[:5] for r in rows]))
    print("init flags=%s  dlopen/init/handle/name/shutdown ms (median of 7): %s  %s" % (flags, " ".join("%.2f" % statistics.median(map(float, c)) for c in cols), rows[0][5]))
print("python -c pass: %.2f ms" % med([sys.executable, "-c", "pass"], 7))
print("gpumem --version: %.2f ms" % med([binary, "--version"]))
print("gpumem query index: %.2f ms" % med([binary, "query", "--query-gpu=index", "--format=csv"]))
print("nvidia-smi query index: %.2f ms" % med(["nvidia-smi", "--query-gpu=index", "--format=csv"]))
lib = ctypes.CDLL("libnvidia-ml.so.1"); lib.nvmlInit_v2()
h = ctypes.c_void_p(); lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
buf = ctypes.create_string_buffer(256); u = ctypes.c_uint(); uu = (ctypes.c_uint * 8)(); ull = (ctypes.c_ulonglong * 8)()
mem2 = (ctypes.c_ulonglong * 5)(); mem2[0] = 40 | (2 << 24)
calls = {
 "SystemGetDriverVersion": lambda: lib.nvmlSystemGetDriverVersion(buf, 80),
 "DeviceGetCount_v2": lambda: lib.nvmlDeviceGetCount_v2(ctypes.byref(u)),
 "GetHandleByIndex_v2": lambda: lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(ctypes.c_void_p())),
 "GetName": lambda: lib.nvmlDeviceGetName(h, buf, 96),
 "GetUUID": lambda: lib.nvmlDeviceGetUUID(h, buf, 96),
 "GetPciInfo_v3": lambda: lib.nvmlDeviceGetPciInfo_v3(h, buf),
 "GetMinorNumber": lambda: lib.nvmlDeviceGetMinorNumber(h, ctypes.byref(u)),
 "GetMemoryInfo_v2": lambda: lib.nvmlDeviceGetMemoryInfo_v2(h, mem2),
 "GetMemoryInfo": lambda: lib.nvmlDeviceGetMemoryInfo(h, ull),
 "GetPerformanceState": lambda: lib.nvmlDeviceGetPerformanceState(h, ctypes.byref(u)),
 "GetTemperature": lambda: lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(u)),
 "GetUtilizationRates": lambda: lib.nvmlDeviceGetUtilizationRates(h, uu),
 "GetPowerUsage": lambda: lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(u)),
 "GetPowerManagementLimit": lambda: lib.nvmlDeviceGetPowerManagementLimit(h, ctypes.byref(u)),
 "GetClockInfo(SM)": lambda: lib.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(u)),
 "GetClockInfo(MEM)": lambda: lib.nvmlDeviceGetClockInfo(h, 2, ctypes.byref(u)),
 "GetMaxClockInfo(SM)": lambda: lib.nvmlDeviceGetMaxClockInfo(h, 1, ctypes.byref(u)),
 "GetFanSpeed": lambda: lib.nvmlDeviceGetFanSpeed(h, ctypes.byref(u)),
 "GetPersistenceMode": lambda: lib.nvmlDeviceGetPersistenceMode(h, ctypes.byref(u)),
 "GetComputeMode": lambda: lib.nvmlDeviceGetComputeMode(h, ctypes.byref(u)),
 "GetComputeRunningProcesses_v3": lambda: lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(ctypes.c_uint(0)), None),
}
for name, fn in calls.items():
    fn(); n = 200
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n): rc = fn()
    c1, w1 = time.process_time(), time.perf_counter()
    print("  %-30s rc=%-3d wall %8.1f us  cpu %8.1f us" % (name, rc, (w1 - w0) / n * 1e6, (c1 - c0) / n * 1e6))
PY
  which strace perf ltrace
  exit 0
fi

echo "== gpumem: $BIN"; ldd "$BIN" | grep -E "not found" && FAILS=$((FAILS+1))
nvidia-smi --version | head -3

echo "== 1. query vs nvidia-smi --query-gpu"
for fmt in csv csv,nounits csv,noheader,nounits; do
  nvidia-smi --query-gpu=$FIELDS --format=$fmt > "$OUTDIR/smi.$fmt.raw"
  "$BIN" query --query-gpu=$FIELDS --format=$fmt > "$OUTDIR/gpumem.$fmt.raw"
  mask < "$OUTDIR/smi.$fmt.raw" > "$OUTDIR/smi.$fmt"
  mask < "$OUTDIR/gpumem.$fmt.raw" > "$OUTDIR/gpumem.$fmt"
  check "query-gpu --format=$fmt" "$OUTDIR/smi.$fmt" "$OUTDIR/gpumem.$fmt"
done

cat "$OUTDIR/gpumem.csv.raw"

echo "== 2. with a PyTorch process"
python3 -c "
import torch, time, sys
x = torch.empty(3 << 30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()
print('ready', flush=True); time.sleep(120)" > "$OUTDIR/torch.log" 2>&1 &
TORCH=$!
sleep 60 3</dev/nvidia0 &
HOLDER=$!
for _ in $(seq 1 600); do grep -q ready "$OUTDIR/torch.log" && break; sleep 0.1; done
sleep 0.5
APPS=pid,process_name,gpu_uuid,used_memory
nvidia-smi --query-compute-apps=$APPS --format=csv > "$OUTDIR/smi.apps"
"$BIN" query --query-compute-apps=$APPS --format=csv > "$OUTDIR/gpumem.apps"
check "query-compute-apps (PyTorch pid $TORCH)" "$OUTDIR/smi.apps" "$OUTDIR/gpumem.apps"
cat "$OUTDIR/gpumem.apps"
"$BIN" ps > "$OUTDIR/gpumem.ps"; cat "$OUTDIR/gpumem.ps"
"$BIN" ps --json > "$OUTDIR/gpumem.ps.json"
"$BIN" info > "$OUTDIR/gpumem.info"; cat "$OUTDIR/gpumem.info"
SMI_MIB=$(awk -F', ' -v p=$TORCH '$1==p {print $4}' "$OUTDIR/smi.apps")
PS_MIB=$(python3 -c "
import json; d=json.load(open('$OUTDIR/gpumem.ps.json'))
print(' '.join('%d MiB' % (p['used_memory_bytes'] >> 20) for p in d['processes'] if p['pid']==$TORCH and p['used_memory_bytes'] is not None))")
if [[ -n "$SMI_MIB" && "$SMI_MIB" == "$PS_MIB" ]]; then row "ps: PyTorch memory == nvidia-smi" "yes ($PS_MIB)"; else row "ps: PyTorch memory == nvidia-smi" "NO (smi '$SMI_MIB', ps '$PS_MIB')"; FAILS=$((FAILS+1)); fi
HOLDER_KIND=$(python3 -c "
import json; d=json.load(open('$OUTDIR/gpumem.ps.json'))
print(','.join(p['kind'] for p in d['processes'] if p['pid']==$HOLDER) or 'absent')")
if [[ "$HOLDER_KIND" == "no_context" ]]; then row "ps: /dev/nvidia0 holder flagged" "yes (pid $HOLDER, no_context)"; else row "ps: /dev/nvidia0 holder flagged" "NO ($HOLDER_KIND)"; FAILS=$((FAILS+1)); fi
kill $HOLDER $TORCH 2>/dev/null; wait $HOLDER $TORCH 2>/dev/null

echo "== 3. latency and loop CPU"
python3 - "$BIN" "$FIELDS" "$N" "$LOOP_S" "$OUTDIR" > "$OUTDIR/perf.txt" <<'PY'
import os, signal, statistics, subprocess, sys, time
binary, fields, n, loop_s, outdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
smi = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv"]
gm = [binary, "query", f"--query-gpu={fields}", "--format=csv"]
def once(cmd, env=None):
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    return time.perf_counter() - t, ru.ru_utime + ru.ru_stime
for cmd in (smi, gm): once(cmd)  # warm the page cache
lat = {"smi": [], "gm": []}
for _ in range(n):  # interleaved so both see the same machine state
    lat["smi"].append(once(smi)[0]); lat["gm"].append(once(gm)[0])
ms = {k: statistics.median(v) * 1000 for k, v in lat.items()}
print(f"oneshot_median_ms nvidia-smi={ms['smi']:.2f} gpumem={ms['gm']:.2f} speedup={ms['smi']/ms['gm']:.2f}")
print(f"oneshot_min_ms nvidia-smi={min(lat['smi'])*1000:.2f} gpumem={min(lat['gm'])*1000:.2f}")
def loop(cmd, name):
    f = open(f"{outdir}/loop.{name}.csv", "w")
    return subprocess.Popen(cmd, stdout=f), f
procs = {"smi": loop(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader", "-lms", "10"], "smi"),
         "gm": loop([binary, "query", f"--query-gpu={fields}", "--format=csv,noheader", "-lms", "10"], "gm")}
time.sleep(loop_s)
res = {}
for k, (p, f) in procs.items():
    p.send_signal(signal.SIGINT)
    _, status, ru = os.wait4(p.pid, 0)
    f.close()
    samples = sum(1 for _ in open(f"{outdir}/loop.{k}.csv"))
    cpu = ru.ru_utime + ru.ru_stime
    res[k] = (cpu, samples)
    print(f"loop_{k} cpu_s={cpu:.3f} samples={samples} core_pct={cpu/loop_s*100:.2f} us_per_sample={cpu/max(samples,1)*1e6:.1f}")
ratio = (res['smi'][0]/max(res['smi'][1],1)) / (res['gm'][0]/max(res['gm'][1],1))
print(f"loop_cpu_per_sample_ratio={ratio:.1f}")
PY
cat "$OUTDIR/perf.txt"
read -r SMI_MS GM_MS SPEED < <(awk '/^oneshot_median/ {split($2,a,"="); split($3,b,"="); split($4,c,"="); print a[2], b[2], c[2]}' "$OUTDIR/perf.txt")
read -r GM_PCT GM_US < <(awk '/^loop_gm/ {split($4,a,"="); split($5,b,"="); print a[2], b[2]}' "$OUTDIR/perf.txt")
read -r SMI_PCT SMI_US < <(awk '/^loop_smi/ {split($4,a,"="); split($5,b,"="); print a[2], b[2]}' "$OUTDIR/perf.txt")
RATIO=$(awk -F= '/^loop_cpu_per_sample_ratio/ {print $2}' "$OUTDIR/perf.txt")
verdict() { if awk "BEGIN{exit !($1)}"; then echo "meets"; else echo "MISSES"; fi; }
row "one-shot median (N=$N): nvidia-smi / gpumem" "$SMI_MS ms / $GM_MS ms = ${SPEED}x ($(verdict "$GM_MS <= 9 && $SPEED >= 2.5") <=9 ms, >=2.5x)"
row "loop -lms 10, ${LOOP_S}s: CPU % of a core" "nvidia-smi $SMI_PCT % / gpumem $GM_PCT % ($(verdict "$GM_PCT <= 1") <=1 %)"
row "loop CPU per sample" "nvidia-smi $SMI_US us / gpumem $GM_US us = ${RATIO}x ($(verdict "$RATIO >= 10") >=10x)"

echo "== 3. nvidia-smi compatibility (issue 10): the remaining --query-gpu fields, dmon columns per letter"
STATIC=vbios_version,serial,display_mode,display_active,pcie.link.gen.max,pcie.link.width.max,enforced.power.limit,power.default_limit,power.min_limit,power.max_limit,ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total,temperature.memory,clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,clocks_event_reasons.sync_boost
for f in ${STATIC//,/ }; do
  nvidia-smi --query-gpu=$f --format=csv > "$OUTDIR/smi.f.$f" 2>&1
  "$BIN" query --query-gpu=$f --format=csv > "$OUTDIR/gpumem.f.$f" 2>&1
  check "query-gpu $f" "$OUTDIR/smi.f.$f" "$OUTDIR/gpumem.f.$f"
done
nvidia-smi --query-gpu=clocks_event_reasons.active,pcie.link.gen.current,pcie.link.width.current --format=csv
"$BIN" query --query-gpu=clocks_event_reasons.active,pcie.link.gen.current,pcie.link.width.current --format=csv
nvidia-smi --help-query-gpu | grep -o '^"[a-z_.]*"' | tr -d '"' | sort > "$OUTDIR/smi.fields"
"$BIN" query --help-query-gpu | grep -o '^"[a-z_.]*"' | tr -d '"' | sort > "$OUTDIR/gpumem.fields"
echo "fields nvidia-smi lists that gpumem does not (informational):"; comm -23 "$OUTDIR/smi.fields" "$OUTDIR/gpumem.fields" | tr '\n' ' '; echo
for letter in p u c m e t; do
  nvidia-smi dmon -c 1 -s $letter | head -2 > "$OUTDIR/smi.dmon.$letter"
  "$BIN" dmon -c 1 -s $letter | head -2 > "$OUTDIR/gpumem.dmon.$letter"
  check "dmon -s $letter header" "$OUTDIR/smi.dmon.$letter" "$OUTDIR/gpumem.dmon.$letter"
done

echo "== 4. gpumem top: screen with a PyTorch process under gpumem run, CPU per refresh beside nvidia-smi -l 1"
"$BIN" run -- python3 -c "
import torch, time
x = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); y = torch.empty(1 << 30, dtype=torch.uint8, device='cuda'); del y
torch.cuda.synchronize(); print('ready', flush=True); time.sleep(90)" > "$OUTDIR/run.log" 2>&1 &
RUNPID=$!
for _ in $(seq 1 600); do grep -q ready "$OUTDIR/run.log" && break; sleep 0.1; done
tmux -L gpucheck kill-server 2>/dev/null
tmux -L gpucheck -f /dev/null new-session -d -x 160 -y 40 "echo \$\$ > $OUTDIR/top.pid; exec $BIN top -d 1"
sleep 3
TOPPID=$(cat "$OUTDIR/top.pid")
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
T0=$(ticks "$TOPPID"); sleep 30; T1=$(ticks "$TOPPID")
tmux -L gpucheck capture-pane -p > "$OUTDIR/top_screen.txt"; cat "$OUTDIR/top_screen.txt"
tmux -L gpucheck send-keys q; sleep 1; tmux -L gpucheck kill-server 2>/dev/null
nvidia-smi -l 1 > /dev/null & SMIPID=$!
sleep 2; S0=$(ticks "$SMIPID"); sleep 30; S1=$(ticks "$SMIPID"); kill "$SMIPID"
HZ=$(getconf CLK_TCK)
TOP_PCT=$(awk "BEGIN{printf \"%.2f\", ($T1-$T0)/$HZ/30*100}")
SMI_PCT=$(awk "BEGIN{printf \"%.2f\", ($S1-$S0)/$HZ/30*100}")
row "top -d 1: CPU % of a core (30 refreshes)" "gpumem top $TOP_PCT % / nvidia-smi -l 1 $SMI_PCT % ($(verdict "$TOP_PCT <= 1") <=1 %)"
grep -q "ALLOC" "$OUTDIR/top_screen.txt" && grep -Eq "[0-9.]+G .*python3?" "$OUTDIR/top_screen.txt" \
  && row "top shows the gpumem run process" "yes" || { row "top shows the gpumem run process" "NO (see top_screen.txt)"; FAILS=$((FAILS+1)); }
kill "$RUNPID" 2>/dev/null

echo "== 5. gpumem exporter vs nvidia-smi and gpumem query, scrape cost (scripts/gpu-check-exporter.sh)"
if OUT="$OUTDIR/exporter" scripts/gpu-check-exporter.sh "$BIN"; then row "exporter: metrics == nvidia-smi, scrape, CPU" "meets"; else row "exporter: metrics == nvidia-smi, scrape, CPU" "MISSES (see above)"; fi

echo "== 6. health fields vs nvidia-smi (scripts/gpu-check-health.sh)"
if scripts/gpu-check-health.sh "$BIN"; then row "health: retired pages, dmon v/u, %SM, XID" "meets"; else row "health: retired pages, dmon v/u, %SM, XID" "MISSES (see above)"; fi

echo
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1))"
for r in "${ROWS[@]}"; do echo "$r"; done
FAILS=$((FAILS + $(printf '%s\n' "${ROWS[@]}" | grep -c MISSES)))
echo "failures: $FAILS"
exit $((FAILS > 0))
