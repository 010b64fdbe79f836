"""Do kernels run slower on memory mapped from small physical pages? Times, with no allocation inside the
timed loops, kernels over large tensors: a streaming add over 1 GiB, a random gather from a 2 GiB table
(the access pattern most sensitive to address translation), and an 8192^2 fp16 matmul. Run natively and
under `gpumem run` at several GPUMEM_CUDA_PAGE_MIB (scripts/gpu-engine-check.sh does); prints one JSON line."""
import json
import os

import torch


def timed(fn, reps=30):
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps


x = torch.ones(512 << 20, dtype=torch.float16, device="cuda")
y = torch.empty_like(x)
table = torch.randn(1 << 20, 1024, dtype=torch.float16, device="cuda")  # 2 GiB
idx = torch.randint(0, 1 << 20, (1 << 16,), device="cuda")
rows = torch.empty(1 << 16, 1024, dtype=torch.float16, device="cuda")
a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
b = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
c = torch.empty(8192, 8192, dtype=torch.float16, device="cuda")
out = {
    "page_mib": os.environ.get("GPUMEM_CUDA_PAGE_MIB", ""),
    "add_1GiB_ms": timed(lambda: torch.add(x, 1, out=y)),
    "gather_2GiB_ms": timed(lambda: torch.index_select(table, 0, idx, out=rows)),
    "matmul_8192_ms": timed(lambda: torch.matmul(a, b, out=c)),
}
print(json.dumps(out))
