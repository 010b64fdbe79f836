"""Cross-device checks on a host with 2+ GPUs, natively and under `gpumem run` (the same answers expected):

  record_stream_other_gpu  a tensor on cuda:0 marked used by a busy stream of cuda:1 (record_stream), then
                           freed: while that stream still runs, a new tensor of its size on cuda:0 must not
                           get its memory, even after empty_cache(); once cuda:1 is synchronized it may.
  graph_tree_other_device  torch.compile(mode="reduce-overhead") of a model on cuda:1 called while cuda:0 is
                           the current device (CUDA graph trees free restored blocks under whatever device is
                           current): outputs equal eager.

Prints one JSON line per check; exit status 1 when a check fails, 2 with fewer than 2 GPUs.
Usage: python3 bench/gpu/cross_gpu_checks.py    /    gpumem run -- python3 bench/gpu/cross_gpu_checks.py"""
import json
import sys

import torch

MiB = 1 << 20


def record_stream_other_gpu():
    torch.cuda.set_device(0)
    n = 64 * MiB // 4
    x = torch.full((n,), 7.0, device="cuda:0")
    address = x.data_ptr()
    torch.cuda.synchronize(0)
    s1 = torch.cuda.Stream(device="cuda:1")
    with torch.cuda.device(1), torch.cuda.stream(s1):
        torch.cuda._sleep(2_000_000_000)  # ~1 s of a spinning kernel on cuda:1's stream
    x.record_stream(s1)
    del x
    torch.cuda.empty_cache()
    busy = torch.empty((n,), device="cuda:0")
    reused_while_busy = busy.data_ptr() == address
    torch.cuda.synchronize(1)
    del busy
    return {"ok": not reused_while_busy, "reused_while_busy": reused_while_busy}


def graph_tree_other_device():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).to("cuda:1")
    compiled = torch.compile(model, mode="reduce-overhead")
    torch.cuda.set_device(0)
    worst = 0.0
    with torch.no_grad():
        for i in range(8):
            x = torch.randn(32 + 32 * (i % 2), 256, device="cuda:1")
            worst = max(worst, (compiled(x).clone() - model(x)).abs().max().item())
    torch.cuda.synchronize(1)
    return {"ok": worst < 1e-3, "worst_abs_diff": worst}


if __name__ == "__main__":
    if torch.cuda.device_count() < 2:
        print(json.dumps({"error": "needs 2 GPUs", "devices": torch.cuda.device_count()}))
        sys.exit(2)
    failed = 0
    for check in (record_stream_other_gpu, graph_tree_other_device):
        try:
            result = check()
        except Exception as e:  # a check that raises fails; the next one still runs
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
        failed += not result["ok"]
        print(json.dumps({"check": check.__name__, **result}), flush=True)
    sys.exit(1 if failed else 0)
