"""Replays gpumem-trace files through whatever allocator PyTorch runs on (its own, its expandable_segments, or
gpumem under `gpumem run`), on the GPU: one torch.empty(size, uint8) per alloc, dropped at its free (at its
free_completed where the trace has those), all on the current stream. Prints, per trace, one JSON line: peak
reserved, peak requested (PyTorch's requested_bytes.all.peak: what the program asked for) and their ratio.
Judges the engine against PyTorch's allocators on traces recorded nowhere (scripts/synth-traces.py).

Usage (GPU machine): python3 bench/gpu/trace_through_torch.py TRACE...
  native:     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False python3 ...
  expandable: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 ...
  gpumem:     gpumem run -q -- python3 ..."""
import gzip
import json
import sys

import torch


def replay(path):
    with gzip.open(path, "rt") as f:
        header = json.loads(f.readline())
        events = [json.loads(line) for line in f if line.strip()]
    completed = any(e["op"] == "free_completed" for e in events)
    release = "free_completed" if completed else "free"
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    live = {}
    for e in events:
        if e["op"] == "alloc":
            live[e["addr"]] = torch.empty(e["size"], dtype=torch.uint8, device="cuda")
        elif e["op"] == "end":
            break
        elif e["op"] == release:
            live.pop(e["addr"], None)
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    out = {"trace": path.split("/")[-1], "source": header.get("source", ""),
           "peak_reserved": s["reserved_bytes.all.peak"], "peak_requested": s["requested_bytes.all.peak"]}
    out["ratio"] = out["peak_reserved"] / max(out["peak_requested"], 1)
    live.clear()
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        print(json.dumps(replay(path)), flush=True)
