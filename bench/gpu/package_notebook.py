"""A notebook-like session on the GPU machine for bench/gpu/package_check.sh: gpumem.track around real
PyTorch work (nested), tensors(), purge(), print_memory(), under whichever allocator the process has
(plain python: PyTorch's; under `gpumem run`: gpumem's). Prints PASS/FAIL lines."""
import sys

import torch

import gpumem

MiB = 1 << 20
fails = 0


def check(name, ok, detail=""):
    global fails
    fails += not ok
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}")


allocator = torch.cuda.memory.get_allocator_backend() if hasattr(torch.cuda.memory, "get_allocator_backend") else "?"
model = torch.nn.Linear(1024, 1024, device="cuda")
opt = torch.optim.Adam(model.parameters())
with gpumem.track("epoch", quiet=True) as epoch:
    for step in range(3):
        with gpumem.track(f"step {step}", quiet=True) as inner:
            x = torch.randn(256, 1024, device="cuda")
            big = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
            del big
            model(x).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
check(f"[{allocator}] track: inner peak sees the 64 MiB temporary", inner.peak - inner.allocated_before >= 64 * MiB,
      f"peak {inner.peak} before {inner.allocated_before}")
check(f"[{allocator}] track: outer peak >= inner peak", epoch.peak >= inner.peak, f"{epoch.peak} {inner.peak}")
print(gpumem.summary())
groups = gpumem.tensors()
weight = [g for g in groups if g.shape == (1024, 1024)]
check(f"[{allocator}] tensors: weight, its gradient and Adam's two states", bool(weight) and weight[0].count == 4,
      str(weight[0]) if weight else str(groups[:3]))
for g in groups[:5]:
    print("  ", g)
del x, model, opt, weight, groups
result = gpumem.purge(quiet=True)
check(f"[{allocator}] purge: reserved went down", result.reserved_after <= result.reserved_before, str(result))
gpumem.print_memory()
sys.exit(1 if fails else 0)
