"""A PyTorch program that bench/gpu/control_check.py controls from outside (run under `gpumem run`).
  train CACHE_MIB PROBE_MIB [history]: trains a small MLP; first fills CACHE_MIB and frees it (cached, not
      used); each step also tries a PROBE_MIB tensor and prints "probe ok|oom" when that changes;
      gpumem_torch.on_stop ends the loop: prints "stopped gracefully". "history": records
      torch.cuda.memory._record_memory_history, so `gpumem snapshot` from outside carries a trace.
  hold CACHE_MIB: allocates CACHE_MIB, frees it (cached), then idles until stopped.
  need MIB: allocates MIB at once, prints "need ok" or "need oom"."""
import os
import sys
import time

import torch
import gpumem_torch

mode = sys.argv[1]
stopped = []
gpumem_torch.on_stop(lambda: stopped.append(True))
if mode == "need":
    try:
        x = torch.empty(int(sys.argv[2]) << 20, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        print("need ok", flush=True)
    except torch.OutOfMemoryError as e:
        print("need oom", str(e).splitlines()[0], flush=True)
    sys.exit(0)

if mode == "train" and "history" in sys.argv[4:]:
    torch.cuda.memory._record_memory_history(max_entries=10000)
cache = torch.empty(int(sys.argv[2]) << 20, dtype=torch.uint8, device="cuda")
cache.fill_(1)
torch.cuda.synchronize()
del cache
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
print("ready", os.getpid(), torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), flush=True)
probe_mib = int(sys.argv[3]) if mode == "train" and len(sys.argv) > 3 else 0
last_probe, step, t0 = None, 0, time.time()
while not stopped and time.time() - t0 < 240:
    if mode == "hold":
        time.sleep(0.01)
        continue
    x = torch.randn(256, 4096, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if probe_mib:
        try:
            p = torch.empty(probe_mib << 20, dtype=torch.uint8, device="cuda")
            del p
            state = "ok"
        except torch.OutOfMemoryError:
            state = "oom"
        if state != last_probe:
            print("probe", state, step, flush=True)
            last_probe = state
    step += 1
torch.cuda.synchronize()
print("stopped gracefully" if stopped else "timed out", "after", step, "steps", flush=True)
sys.exit(0 if stopped else 1)
