"""GPU check of memory history and snapshots (issue 8 item 3), real torch, run natively and under
gpumem (`gpumem run -- python3 bench/gpu/snapshot_check.py OUT.pickle`): records history with Python
stacks, allocates / frees / empties the cache / hits an OOM, then reads the snapshot with PyTorch's own
torch.cuda._memory_viz (segments, memory, trace_plot, segment_plot) and checks it against what the
program did. Prints PASS/FAIL lines and figures; exit 1 on any FAIL."""
import inspect
import pickle
import sys
import time

import torch
from torch.cuda import _memory_viz

failures = 0


def check(cond, what):
    global failures
    print(("PASS " if cond else "FAIL ") + what, flush=True)
    failures += 0 if cond else 1


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "snapshot_check.pickle"
    backend = torch.cuda.memory.get_allocator_backend()
    print("allocator backend:", backend)
    torch.cuda.memory._record_memory_history(max_entries=100000)

    def make_activation():
        return torch.empty(12 << 20, dtype=torch.uint8, device="cuda")

    a = torch.empty(4000, dtype=torch.uint8, device="cuda")
    b = make_activation()
    c = torch.empty(50 << 20, dtype=torch.uint8, device="cuda")
    del b
    torch.cuda.empty_cache()
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        check(False, "1 PiB allocation raises")
    except torch.OutOfMemoryError as e:
        check(str(e).startswith("CUDA out of memory. Tried to allocate"), "OOM message begins like PyTorch's")
    except RuntimeError as e:
        check("CUDA out of memory" in str(e), "OOM message (RuntimeError) names CUDA out of memory")
    t0 = time.perf_counter()
    s = torch.cuda.memory._snapshot()
    print(f"snapshot: {(time.perf_counter() - t0) * 1e3:.2f} ms, {len(s['segments'])} segments, "
          f"{sum(len(t) for t in s['device_traces'])} trace entries")
    torch.cuda.memory._dump_snapshot(out)
    with open(out, "rb") as f:
        dumped = pickle.load(f)
    check(set(dumped) >= {"segments", "device_traces", "allocator_settings"}, "_dump_snapshot wrote PyTorch's keys")
    actions = {e["action"] for t in s["device_traces"] for e in t}
    for needed in ("alloc", "free_requested", "free_completed", "oom"):
        check(needed in actions, f"trace has {needed}")
    check(bool(actions & {"segment_alloc", "segment_map"}), "trace has segment_alloc or segment_map")
    frames = [f["name"] for t in s["device_traces"] for e in t if e["action"] == "alloc" for f in e["frames"]]
    check("make_activation" in frames, "alloc entries carry Python frames (make_activation)")
    live = [blk for seg in s["segments"] for blk in seg["blocks"] if blk["state"] == "active_allocated"]
    sizes = sorted(blk["requested_size"] for blk in live)
    check(4000 in sizes and (50 << 20) in sizes, f"live blocks requested sizes include 4000 and 50 MiB: {sizes[:6]}")
    check(isinstance(torch.cuda.memory_snapshot(), list), "torch.cuda.memory_snapshot() returns the segments")
    for name in ("segments", "memory", "trace_plot", "segment_plot"):
        fn = getattr(_memory_viz, name, None)
        if fn is None:
            continue
        try:
            # segments/memory hand folded stacks to flamegraph.pl, which _memory_viz downloads (no network on
            # GPU hosts): the folded stacks themselves are what PyTorch made of this snapshot.
            if "format_flamegraph" in inspect.signature(fn).parameters:
                text = fn(s, format_flamegraph=lambda folded: folded)
            else:
                text = fn(s)
            check(len(text) > 0, f"_memory_viz.{name} renders ({len(text)} chars)")
        except Exception as e:  # noqa: BLE001
            check(False, f"_memory_viz.{name}: {type(e).__name__}: {e}")
    torch.cuda.memory._record_memory_history(enabled=None)
    del a, c
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
