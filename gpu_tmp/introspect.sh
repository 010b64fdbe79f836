#!/usr/bin/env bash
# One-off: what PyTorch 2.11 offers a pluggable allocator; native snapshot fixture; new traces.
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -c "import torch,sys; print(torch.__version__, torch.version.cuda, sys.version)"
TP=$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")
(cd $TP && tar czf $OUT/torchpy.tgz cuda/memory.py cuda/graphs.py cuda/_memory_viz.py cuda/__init__.py cuda/memory.py \
   _inductor/cudagraph_trees.py multiprocessing/reductions.py storage.py _C/__init__.pyi $(ls _C/_cuda*.pyi 2>/dev/null) \
   cuda/_utils.py utils/_python_dispatch.py 2>&1 | tail -3)
for lib in libc10.so libc10_cuda.so libtorch_cuda.so libtorch_python.so; do
  nm -DC --defined-only $TP/lib/$lib 2>/dev/null | grep -E "OutOfMemoryError|CUDAPluggableAllocator|c10::Error::Error|beginAllocateToPool|_cuda_" | head -200
done > $OUT/symbols.txt
for lib in libc10.so libc10_cuda.so libtorch_cuda.so libtorch_python.so; do
  nm -D --defined-only $TP/lib/$lib 2>/dev/null | grep -E "OutOfMemoryError|c10.*5Error(C1|C2|D0|D1|D2)|ZTIN3c105ErrorE|ZTVN3c105ErrorE" | head -50
done >> $OUT/symbols.txt
python3 - <<'PY' > $OUT/introspect.txt 2>&1
import torch, ctypes, inspect
print(torch.__version__)
names=[n for n in dir(torch._C) if n.startswith('_cuda') or 'ool' in n or 'Alloc' in n or 'alloc' in n]
print("torch._C:", names)
try:
    a = torch.cuda.memory.CUDAPluggableAllocator(ctypes.util.find_library('c') or 'libc.so.6','malloc','free')
except Exception as e:
    import ctypes.util
    a = torch.cuda.memory.CUDAPluggableAllocator('libc.so.6','malloc','free')
raw=a.allocator()
print("raw:", type(raw), [n for n in dir(raw) if not n.startswith('__')])
print("MemPool:", [n for n in dir(torch.cuda.MemPool) if not n.startswith('__')])
print("CUDAGraph:", [n for n in dir(torch.cuda.CUDAGraph) if not n.startswith('__')])
print(inspect.signature(torch.cuda.memory._record_memory_history))
for f in ['_cuda_beginAllocateCurrentThreadToPool','_cuda_beginAllocateToPool','_cuda_endAllocateToPool','_cuda_releasePool','_cuda_checkPoolLiveAllocations','_cuda_getCheckpointState','_cuda_setCheckpointPoolState','_cuda_record_memory_history','_cuda_memorySnapshot','_cuda_attach_out_of_memory_observer','_cuda_cudaCachingAllocator_raw_alloc','_cuda_getAllocatorBackend','_cuda_get_conv_benchmark_empty_cache','_cuda_beginAllocateCurrentStreamToPool']:
    print(f, getattr(torch._C, f, None).__doc__ if hasattr(torch._C,f) else "MISSING")
PY
# Native snapshot fixture + graph checks natively
python3 - <<'PY' > $OUT/fixture.txt 2>&1
import torch, pickle
torch.cuda.init()
torch.cuda.memory._record_memory_history(max_entries=100000, context="all", stacks="python")
x = torch.empty(1000, device="cuda"); y = torch.empty(3<<20, device="cuda"); z = torch.empty(50<<20, dtype=torch.uint8, device="cuda")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    w = torch.empty(4096, device="cuda")
del y
try:
    torch.empty(1<<50, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError as e:
    print("OOM msg:", str(e)[:600])
snap = torch.cuda.memory._snapshot()
with open("/tmp/native_snapshot.pickle","wb") as f: pickle.dump(snap, f)
print("keys", list(snap.keys()))
print("segment keys", list(snap['segments'][0].keys()))
print("block keys", list(snap['segments'][0]['blocks'][0].keys()))
print("trace keys", list(snap['device_traces'][0][0].keys()), set(e['action'] for e in snap['device_traces'][0]))
print("first trace", {k:v for k,v in snap['device_traces'][0][0].items() if k!='frames'})
print("allocator_settings" , snap.get('allocator_settings'))
ms = torch.cuda.memory_snapshot(); print("memory_snapshot type", type(ms), len(ms))
print(sorted(torch.cuda.memory_stats().keys()))
print(torch.cuda.memory_summary()[:3000])
PY
cp /tmp/native_snapshot.pickle $OUT/ 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
for w in gpt2_generate pipeline3 detection; do timeout 150 python3 ../bench/gpu/record_workloads.py $w $OUT/$w.jsonl.gz 2>&1 | grep -v Warning | tail -4; done
ls -la $OUT
