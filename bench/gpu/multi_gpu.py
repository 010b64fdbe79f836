"""Multi-GPU check under `gpumem run` (scripts/gpu-check.sh step 9): one allocator per device, chosen by the
device index PyTorch passes. On every GPU: tensors live in that GPU's memory (a kernel there computes with
them, the result crosses devices intact), gpumem counts them on that device and on no other, and each
device's limit holds on its own. Prints one JSON line; exit status 1 on any mismatch."""
import json
import sys

import torch
import gpumem_torch

n = torch.cuda.device_count()
MiB = 1 << 20
checks, held = {}, []
for d in range(n):
    before = [gpumem_torch.memory_allocated(i) for i in range(n)]
    with torch.cuda.device(d):
        a = torch.full((64 * MiB // 4,), float(d + 1), device=f"cuda:{d}")
        b = a * 2  # a kernel on device d reads and writes gpumem memory of device d
    after = [gpumem_torch.memory_allocated(i) for i in range(n)]
    grew = [after[i] - before[i] for i in range(n)]
    value = b.to("cuda:0" if d else f"cuda:{n - 1}")[123].item()  # crosses devices
    checks[d] = {"counted_here": grew[d] >= 128 * MiB, "not_counted_elsewhere": all(g == 0 for i, g in enumerate(grew) if i != d),
                 "value_ok": value == 2.0 * (d + 1), "device_ok": a.device.index == d and b.device.index == d}
    held += [a, b]
torch.cuda.synchronize()
per_device = {d: {"allocated": gpumem_torch.memory_allocated(d), "reserved": gpumem_torch.memory_reserved(d)}
              for d in range(n)}
ok = n >= 2 and all(all(c.values()) for c in checks.values())
print(json.dumps({"devices": n, "ok": ok, "checks": checks, "per_device": per_device}))
sys.exit(0 if ok else 1)
