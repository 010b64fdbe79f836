#!/usr/bin/env bash
# The one GPU script: proof on a real GPU that gpumem's CUDA backends, PyTorch plug-in and claims hold.
# Not part of `make test` (CI has no GPU). Two halves:
#
#   scripts/gpu-check.sh --prepare   On the development machine (needs nvcc, no GPU): builds gpumem,
#                                    libgpumem.so, gpumem_torch.py, the conformance test and the nvcc-built GPU
#                                    programs, stripped, into .device/gpu (ignored by git; carry it to the device).
#   scripts/gpu-check.sh             On the GPU machine: builds the c10 shim against the torch wheel, then runs
#                                    1 CUDA conformance  2 stream rule  3 host cost vs c10 / cudaMallocAsync /
#                                    cudaMalloc  3b driver call cost (bench/gpu/vmm_cost.cu)  3c the same calls on another thread
#                                    beside kernel launches (bench/gpu/vmm_overlap.cu)  3d the same calls split over
#                                    1-8 threads (bench/gpu/vmm_threads.cu)  3e granules of one large handle mapped
#                                    one by one (bench/gpu/vmm_slices.cu)  4 Python shim with real torch  4c CUDA
#                                    tensors in Process args (bench/gpu/ipc_spawn_check.py)  5 training native vs gpumem vs
#                                    --limit 1.02x peak live (transformer LM, ResNet-50)  6 two processes with a
#                                    limit each on one GPU  7 scripts/gpu-check-monitor.sh if present;
#                                    10 PyTorch memory checks native vs gpumem  11 torch.empty host cost;
#                                    14 data-integrity fuzz (bench/gpu/integrity_fuzz.py), native / gpumem / limit /
#                                       8 threads;
#                                    logs to $OUT (default ./gpu-check-out), a short table last.
# Through the device tool: run(command="bash scripts/gpu-check.sh", carry=[".device/gpu", ".device/mon"]).
# GPU_CHECK_PARTS picks parts (default all, ~30 min): "tools" (1-4b, 12-14), "train" (5), "time" (5b: step time,
# untraced, native and gpumem alternated, bench/gpu/step_time.py; GPU_CHECK_TIME_WORKLOADS picks workloads,
# GPU_CHECK_TIME_VARIANT=VAR=VALUE adds a third arm, e.g. GPUMEM_MAP_AHEAD=0; GPU_CHECK_TIME_EXPANDABLE=1 one more,
# PyTorch's expandable_segments),
# "procs" (6, 7, 9), "torch" (10), "torchcost" (11), "samples" (8); the device tool's 10-minute calls run it
# whole as GPU_CHECK_PARTS="tools procs samples", then "train", then "time" (lm,resnet,vit), "time" (generate),
# "torch", then "torchcost" (step 10 alone takes up to ~9 minutes).
# Exit: 0 every step passed, 1 a step failed or missed its target, 2 an unknown part in GPU_CHECK_PARTS.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.device/gpu

if [[ "${1:-}" == "--prepare" ]]; then
  set -e
  BUILD=${BUILD:-build-gpu}
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGPUMEM_BUILD_BENCH=OFF >/dev/null
  cmake --build "$BUILD" --target gpumem gpumem-exporter gpumem_shared backend_conformance_test -j "${JOBS:-2}"
  mkdir -p "$BIN"
  LIBS="$BUILD/src/api/libgpumem_api.a $BUILD/src/trace/libgpumem_trace.a $BUILD/src/backends/libgpumem_backends.a $BUILD/src/engine/libgpumem_engine.a"
  for prog in tests/gpu/stream_rule.cu bench/gpu/host_cost.cu bench/gpu/vmm_cost.cu bench/gpu/vmm_overlap.cu bench/gpu/vmm_threads.cu bench/gpu/vmm_slices.cu; do
    nvcc -O2 -std=c++20 -gencode arch=compute_90,code=sm_90 -Iinclude -Isrc "$prog" $LIBS -ldl -o "$BIN/$(basename "$prog" .cu)"
  done
  # gpumem-exporter links Debian's cpp-httplib, which the GPU machine lacks: it travels beside it.
  cp -L /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 "$BIN/" 2>/dev/null || true
  cp "$BUILD/gpumem" "$BUILD/gpumem-exporter" "$BUILD/libgpumem.so" "$BUILD/gpumem_torch.py" "$BUILD/gpumem_ipc.py" "$BUILD/gpumem_history.py" "$BUILD/gpumem_pools.py" "$BUILD/gpumem_sitecustomize.py" "$BUILD/tests/backends/backend_conformance_test" "$BIN/"
  strip "$BIN/gpumem" "$BIN/libgpumem.so" "$BIN/backend_conformance_test" "$BIN/stream_rule" "$BIN/host_cost" "$BIN/vmm_cost" "$BIN/vmm_overlap" "$BIN/vmm_threads" "$BIN/vmm_slices"
  du -sh "$BIN"
  exit 0
fi

PARTS=" ${GPU_CHECK_PARTS:-tools train time procs torch torchcost samples} "
for p in $PARTS; do
  [[ " tools train time procs torch torchcost samples " == *" $p "* ]] ||
    { echo "gpu-check: unknown part '$p' in GPU_CHECK_PARTS (parts: tools train time procs torch torchcost samples)"; exit 2; }
done
want() { [[ $PARTS == *" $1 "* ]]; }

OUTDIR=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUTDIR"
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
RES=$WORK/results
mkdir -p "$RES"
LOG=$OUTDIR/gpu-check.log
exec > >(tee "$LOG") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
declare -a ROWS
FAILS=0
row() { ROWS+=("$(printf '%-48s %s' "$1" "$2")"); }
step() {  # name, timeout, command...: runs, records PASS/FAIL with the exit status
  local name=$1 limit=$2
  shift 2
  echo; echo "== $name"
  local t0=$SECONDS
  timeout "$limit" "$@"
  local rc=$?
  if ((rc == 0)); then row "$name" "PASS ($((SECONDS - t0)) s)"; else row "$name" "FAIL (exit $rc)"; FAILS=$((FAILS + 1)); fi
  return $rc
}
finish() {
  tar -C "$WORK" -czf "$OUTDIR/results.tgz" results 2>/dev/null
  echo
  echo "== summary ($(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1))"
  [[ -f $RES/table.md ]] && cat "$RES/table.md" && cp "$RES/table.md" "$OUTDIR/table.md"
  printf '%s\n' "${ROWS[@]}"
  echo "gpu-check: $FAILS failure(s)"
  rm -rf "$WORK"
}
trap finish EXIT
export LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # cpp-httplib for gpumem-exporter

for f in gpumem libgpumem.so gpumem_torch.py gpumem_ipc.py gpumem_history.py gpumem_pools.py gpumem_sitecustomize.py backend_conformance_test stream_rule host_cost vmm_cost vmm_overlap vmm_threads vmm_slices; do
  [[ -e $BIN/$f ]] || { echo "gpu-check: $BIN/$f is missing: run scripts/gpu-check.sh --prepare and carry $BIN"; exit 1; }
done
nvidia-smi -L
python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, torch.cuda.get_device_name())'

# c10 shim: PyTorch's allocator behind C functions, built against this machine's torch wheel.
TORCH=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
CUDA_INC=""
for d in /usr/local/cuda/include "$(python3 -c 'import nvidia.cuda_runtime, os; print(os.path.join(list(nvidia.cuda_runtime.__path__)[0], "include"))' 2>/dev/null)"; do
  [[ -n "$d" && -f $d/cuda_runtime_api.h ]] && { CUDA_INC=$d; break; }
done
echo "parts:$PARTS"

if want tools; then
step "build c10 shim (g++ vs torch headers)" 300 g++ -O2 -std=c++17 -shared -fPIC bench/gpu/c10_shim.cpp \
  -I"$TORCH/include" -I"$CUDA_INC" -L"$TORCH/lib" -lc10 -lc10_cuda -Wl,-rpath,"$TORCH/lib" -o "$WORK/c10_shim.so"

step "1 conformance: cuda + cuda-plain backends" 120 "$BIN/backend_conformance_test" --gtest_filter='Cuda*:CudaDriver*' --gtest_brief=1
step "2 stream rule (record_stream, unmap wait)" 120 "$BIN/stream_rule"
if [[ -f $WORK/c10_shim.so ]]; then SHIM=$WORK/c10_shim.so; else SHIM=""; fi
step "3 host cost vs c10 / cudaMallocAsync / cudaMalloc" 300 "$BIN/host_cost" $SHIM --json "$RES/host_cost.json"
step "3b driver call cost: cuMemCreate/Map/SetAccess/Unmap/Release at 2 and 16 MiB" 120 "$BIN/vmm_cost" --json "$RES/vmm_cost.json"
step "3c driver calls on another thread: do they slow kernel launches?" 120 "$BIN/vmm_overlap" --json "$RES/vmm_overlap.json"
step "3d driver calls split over 1-8 threads: does the driver run them at once?" 120 "$BIN/vmm_threads" --json "$RES/vmm_threads.json"
step "3e granules cut from one large handle: can they be mapped one by one?" 60 "$BIN/vmm_slices"
step "4 python shim + gpumem run (real torch)" 300 env GPUMEM_BUILD_DIR="$PWD/$BIN" python3 -m unittest -v tests/python/test_gpumem_torch.py
step "4c CUDA tensors in Process args, spawn / forkserver: native" 240 python3 bench/gpu/ipc_spawn_check.py
step "4c CUDA tensors in Process args, spawn / forkserver: gpumem" 240 "$BIN/gpumem" run -- python3 bench/gpu/ipc_spawn_check.py
step "4b snapshot -> _memory_viz, native" 120 python3 bench/gpu/snapshot_check.py "$RES/snapshot_native.pickle"
step "4b snapshot -> _memory_viz, gpumem" 120 "$BIN/gpumem" run -- python3 bench/gpu/snapshot_check.py "$RES/snapshot_gpumem.pickle"

# 12 CUDA graphs and memory pools, bit for bit, natively and under gpumem (scripts/gpu-graph-check.sh).
step "12 CUDA graphs and pools: native vs gpumem" 300 env BIN="$BIN" OUT="$RES" bash scripts/gpu-graph-check.sh
# 14 data integrity: random tensors on 3 streams under queued work, record_stream, empty_cache; every byte
# checked. Natively (the control), under gpumem, and under a limit that forces stitching and OOM recovery.
step "14 integrity fuzz: native" 240 python3 bench/gpu/integrity_fuzz.py --json "$RES/fuzz_native.json"
step "14 integrity fuzz: gpumem" 240 "$BIN/gpumem" run -- python3 bench/gpu/integrity_fuzz.py --json "$RES/fuzz_gpumem.json"
step "14 integrity fuzz: gpumem --limit 1800MiB" 240 "$BIN/gpumem" run --limit 1800MiB -- \
  python3 bench/gpu/integrity_fuzz.py --seed 2 --json "$RES/fuzz_limit.json"
# 8 threads at once on the default stream and their own, handing tensors over; under a limit the peak
# allocated must stay within it (peaks over threads are exact).
step "14 integrity fuzz: gpumem --limit 1700MiB, 8 threads" 240 "$BIN/gpumem" run --limit 1700MiB -- \
  python3 bench/gpu/integrity_fuzz.py --threads 8 --streams 2 --steps 2000 --seed 4 --max-peak-mib 1700 \
  --json "$RES/fuzz_threads.json"
step "13 control channel (clear, limit, snapshot, stop, cooperative)" 480 python3 bench/gpu/control_check.py "$BIN/gpumem"
fi
if want train && [[ "${GPU_CHECK_TRAIN:-1}" != 0 ]]; then
# 5 training: native, gpumem, gpumem with --limit 1.02x the peak live bytes gpumem saw.
for w in ${GPU_CHECK_WORKLOADS:-lm resnet vit generate}; do
  step "5 $w native" 300 python3 bench/gpu/train.py $w --out "$RES/${w}_native.json"
  # The gpumem run also records its allocation trace, so `gpumem replay` can study it anywhere.
  step "5 $w gpumem" 300 env GPUMEM_TRACE="$RES/${w}_gpumem_trace.jsonl.gz" "$BIN/gpumem" run --report "$RES/${w}_gpumem_report.json" -- python3 bench/gpu/train.py $w --out "$RES/${w}_gpumem.json"
  if [[ -f $RES/${w}_gpumem.json ]]; then
    limit=$(python3 -c "import json; print(int(json.load(open('$RES/${w}_gpumem.json'))['peak_live'] * 1.02))")
    echo "limit for $w: $limit bytes"
    step "5 $w gpumem --limit 1.02x peak live" 300 "$BIN/gpumem" run --limit "$limit" -- python3 bench/gpu/train.py $w --out "$RES/${w}_limit.json"
  fi
done
# Larger physical pages (fewer driver calls per byte), when GPU_CHECK_PAGE_MIB names sizes.
for page in ${GPU_CHECK_PAGE_MIB:-}; do
  step "5 lm gpumem, ${page} MiB pages" 300 env GPUMEM_CUDA_PAGE_MIB=$page "$BIN/gpumem" run -q -- python3 bench/gpu/train.py lm --out "$RES/lm_page${page}.json"
  python3 - "$RES" "$page" <<'EOF' || true
import json, os, sys
d, page = sys.argv[1], sys.argv[2]
n, g = (json.load(open(os.path.join(d, f))) for f in ("lm_native.json", f"lm_page{page}.json"))
t = sum(g["step_ms"][2:]) / sum(n["step_ms"][2:])
print(f"lm with {page} MiB pages: time ratio {t:.4f}, reserved/live {g['peak_reserved'] / g['peak_live']:.4f}")
EOF
done
for w in ${GPU_CHECK_WORKLOADS:-lm resnet vit generate}; do
  [[ -f $RES/${w}_gpumem_trace.jsonl.gz ]] && "$BIN/gpumem" replay "$RES/${w}_gpumem_trace.jsonl.gz" | tee "$RES/${w}_replay.txt"
done
python3 - "$RES" <<'EOF' || { row "5 targets (loss 1e-3 / generate 2e-2, 1.01x)" "MISSED (see table)"; FAILS=$((FAILS + 1)); }
import json, sys, os
sys.path.insert(0, "bench/gpu")
from compare import loss_tolerance
d = sys.argv[1]
ok = True
for w in os.environ.get("GPU_CHECK_WORKLOADS", "lm resnet vit generate").split():
    try:
        n, g = (json.load(open(os.path.join(d, f"{w}_{k}.json"))) for k in ("native", "gpumem"))
    except OSError:
        sys.exit(1)
    diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(n["losses"], g["losses"]))
    t = sum(g["step_ms"][1:]) / sum(n["step_ms"][1:])
    r = g["peak_reserved"] / g["peak_live"]
    # The gpumem run records its trace, so its time is not the allocator's: part "time" (5b) measures that.
    print(f"{w}: loss diff {diff:.2e}, reserved/live {r:.4f} (time ratio {t:.4f}, traced run, one each)")
    ok &= diff <= loss_tolerance(w) and r <= 1.01
sys.exit(0 if ok else 1)
EOF
fi

if want time; then
# 5b step time from untraced runs, native and gpumem alternated (the traced run above pays for its trace).
  step "5b step time, native vs gpumem, ${GPU_CHECK_TIME_ROUNDS:-3} rounds" 1200 python3 bench/gpu/step_time.py \
    --gpumem "$BIN/gpumem" --rounds "${GPU_CHECK_TIME_ROUNDS:-3}" \
    --workloads "${GPU_CHECK_TIME_WORKLOADS:-lm,resnet,vit,generate}" --json "$RES/step_time.json" \
    ${GPU_CHECK_TIME_VARIANT:+--variant "$GPU_CHECK_TIME_VARIANT"} ${GPU_CHECK_TIME_EXPANDABLE:+--expandable}
  python3 - "$RES/step_time.json" <<'EOF' || { row "5b target (time +-1%)" "MISSED (see above)"; FAILS=$((FAILS + 1)); }
import json, sys
results = json.load(open(sys.argv[1]))
sys.exit(0 if results and all(abs(r["all"]["ratio"] - 1) <= 0.01 for r in results) else 1)
EOF
fi

if want procs; then
# 6 two processes on one GPU, each with its own limit: neither crosses it, both finish.
L=$((8 << 30))
echo; echo "== 6 two processes, --limit 8GiB each"
t0=$SECONDS
timeout 300 "$BIN/gpumem" run --limit 8GiB -- python3 bench/gpu/limit_worker.py $L 1 > "$RES/proc1.json" &
p1=$!
timeout 300 "$BIN/gpumem" run --limit 8GiB -- python3 bench/gpu/limit_worker.py $L 2 > "$RES/proc2.json" &
p2=$!
sleep 5; nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee "$RES/apps.csv"
wait $p1; rc1=$?; wait $p2; rc2=$?
cat "$RES/proc1.json" "$RES/proc2.json"
if ((rc1 == 0 && rc2 == 0)); then row "6 two processes, 8 GiB limit each" "PASS ($((SECONDS - t0)) s)"; else row "6 two processes, 8 GiB limit each" "FAIL (exits $rc1 $rc2)"; FAILS=$((FAILS + 1)); fi

if [[ -f scripts/gpu-check-monitor.sh && "${GPU_CHECK_MONITOR:-1}" != 0 ]]; then
  mkdir -p "$RES/monitor"
  # Its own binary (.device/mon/gpumem) when carried; short loops keep the whole call inside the device limit.
  step "7 monitor (scripts/gpu-check-monitor.sh)" 200 env OUT="$RES/monitor" N="${MON_N:-10}" LOOP_S="${MON_LOOP_S:-10}" \
    bash scripts/gpu-check-monitor.sh "$BIN/gpumem"
fi
# 9 several GPUs: one allocator per device, chosen by the index PyTorch passes; 9b FSDP2 peaks equal PyTorch's;
# 9c cross-device record_stream and graph trees.
if (( $(nvidia-smi -L | wc -l) >= 2 )); then
  step "9 multi-GPU: one allocator per device" 120 "$BIN/gpumem" run -- python3 bench/gpu/multi_gpu.py
  step "9b FSDP2 on every GPU: peaks native vs gpumem" 300 python3 bench/gpu/fsdp_peaks.py --gpumem "$BIN/gpumem"
  # 9c record_stream with another GPU's stream; CUDA graph trees on cuda:1 while cuda:0 is current.
  step "9c cross-GPU checks: native" 120 python3 bench/gpu/cross_gpu_checks.py
  step "9c cross-GPU checks: gpumem" 120 "$BIN/gpumem" run -q -- python3 bench/gpu/cross_gpu_checks.py
fi
fi

# 10 PyTorch's memory behaviour, native vs gpumem (bench/gpu/torch_checks.py), and 11 host cost through
# PyTorch. Long: GPU_CHECK_TORCH=0 leaves them out; scripts/torch-checks.py --only NAMES runs a few.
if want torch && [[ "${GPU_CHECK_TORCH:-1}" != 0 ]]; then
  step "10 torch checks: native vs gpumem run" 580 python3 scripts/torch-checks.py --gpumem "$BIN/gpumem" \
    --json "$RES/torch_checks.json" ${TORCH_CHECKS_ONLY:+--only "$TORCH_CHECKS_ONLY"}
fi
if want torchcost && [[ "${GPU_CHECK_TORCH:-1}" != 0 ]]; then
  step "11 host cost through torch.empty (1, 64 MiB)" 300 python3 bench/gpu/torch_host_cost.py --gpumem "$BIN/gpumem" \
    --json "$RES/torch_host_cost.json"
fi
# 12 control channel: clear / limit / stop on a training process, cooperative release between two (issue 9).

# 8 what a person sees: the monitor commands on this machine, with a PyTorch process holding memory.
if want samples; then
echo; echo "== 8 sample output"
python3 -c 'import torch, time; x = torch.empty(3 << 30, dtype=torch.uint8, device="cuda"); time.sleep(30)' &
holder=$!
sleep 8
{
  for cmd in "info" "query --query-gpu=index,name,memory.total,memory.reserved,memory.used,memory.free,utilization.gpu,power.draw --format=csv" \
             "ps" "dmon -c 3"; do
    echo "\$ gpumem $cmd"; timeout 20 "$BIN/gpumem" $cmd; echo "(exit $?)"; echo
  done
} 2>&1 | tee "$RES/samples.txt"
kill $holder 2>/dev/null; wait $holder 2>/dev/null
fi
python3 bench/gpu/compare.py "$RES" "$RES/host_cost.json" > "$RES/table.md"
exit $((FAILS > 0))
