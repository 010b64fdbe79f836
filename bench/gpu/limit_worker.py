"""One of two processes sharing a GPU under `gpumem run --limit L` (scripts/gpu-check.sh): churns tensors of
log-uniform sizes up to ~90% of L, checks after every step that gpumem reserved no more than L, and asks once
for more than L to see the out-of-memory error arrive as a Python exception. Prints one JSON line."""
import json
import math
import os
import random
import sys

import torch
import gpumem_torch

L = int(sys.argv[1])
random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
live, live_bytes, max_reserved, crossed, oom_seen = [], 0, 0, False, None
for step in range(3000):
    size = int(math.exp(random.uniform(math.log(1 << 20), math.log(256 << 20))))
    while live and live_bytes + size > 0.9 * L:
        t = live.pop(random.randrange(len(live)))
        live_bytes -= t.numel()
        del t
    t = torch.empty(size, dtype=torch.uint8, device="cuda")
    t[:: 1 << 16].fill_(step % 251)
    live.append(t)
    live_bytes += size
    reserved = gpumem_torch.memory_reserved()
    max_reserved = max(max_reserved, reserved)
    crossed = crossed or reserved > L
    if step == 1500:
        try:
            torch.empty(L, dtype=torch.uint8, device="cuda")
        except RuntimeError as e:
            oom_seen = str(e).splitlines()[0][:160]
torch.cuda.synchronize()
print(json.dumps({"pid": os.getpid(), "limit": L, "max_reserved": max_reserved,
                  "peak_reserved": gpumem_torch.max_memory_reserved(), "crossed": crossed, "oom": oom_seen,
                  "backend": gpumem_torch.backend_name()}))
sys.exit(1 if crossed or not oom_seen else 0)
