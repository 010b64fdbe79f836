"""FSDP2 (fully_shard) training on every GPU of the host, one process each: the peak memory PyTorch's API
reports per rank (max_memory_allocated / max_memory_reserved), natively and under `gpumem run`. Issue 7's
example: gpumem reported 3.10 GB where PyTorch reported 2.62 GB (peaks summed per stream). Prints one JSON
line per rank (peaks, losses); exit status 1 if a rank fails.

    python3 bench/gpu/fsdp_peaks.py                      # natively
    .device/gpu/gpumem run -- python3 bench/gpu/fsdp_peaks.py
    python3 bench/gpu/fsdp_peaks.py --gpumem .device/gpu/gpumem   # both, compared (scripts/gpu-check.sh 9b):
                                                         # exit 1 unless every rank's peak allocated and
                                                         # losses are equal
"""
import json
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU())
                                  for _ in range(8)]).cuda()
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    torch.cuda.reset_peak_memory_stats()
    losses = []
    for step in range(6):
        g = torch.Generator("cuda").manual_seed(10 * step + rank)
        x = torch.randn(256, 4096, device="cuda", generator=g)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(round(loss.item(), 6))
    torch.cuda.synchronize()
    results.put({"rank": rank, "max_allocated": torch.cuda.max_memory_allocated(),
                 "max_reserved": torch.cuda.max_memory_reserved(), "losses": losses,
                 "allocator": torch.cuda.memory.get_allocator_backend()})
    dist.destroy_process_group()


def compare(gpumem):
    runs = {}
    for arm, prefix in (("native", []), ("gpumem", [gpumem, "run", "-q", "--"])):
        r = subprocess.run(prefix + [sys.executable, __file__], capture_output=True, text=True, timeout=600)
        ranks = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        if r.returncode != 0 or not ranks:
            sys.exit(f"fsdp_peaks: the {arm} run failed (exit {r.returncode}): {r.stderr.strip()[-300:]}")
        runs[arm] = ranks
    ok = True
    for n, g in zip(runs["native"], runs["gpumem"]):
        same = n["max_allocated"] == g["max_allocated"] and n["losses"] == g["losses"]
        ok = ok and same and g["allocator"] == "pluggable"
        print(f"rank {n['rank']}: max_memory_allocated native {n['max_allocated']:,} gpumem {g['max_allocated']:,}; "
              f"reserved {n['max_reserved']:,} / {g['max_reserved']:,}; losses {'equal' if n['losses'] == g['losses'] else 'DIFFER'}")
    sys.exit(0 if ok else 1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--gpumem":
        compare(sys.argv[2])
    world = torch.cuda.device_count()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, port, results)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    out = [results.get() for _ in range(sum(p.exitcode == 0 for p in procs))]
    for r in sorted(out, key=lambda r: r["rank"]):
        print(json.dumps(r))
    sys.exit(0 if len(out) == world and all(p.exitcode == 0 for p in procs) else 1)


if __name__ == "__main__":
    main()
