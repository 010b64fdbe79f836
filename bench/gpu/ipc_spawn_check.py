"""A CUDA tensor passed to a child process in its Process args, with the spawn and forkserver start methods
(torch.multiprocessing's way to share CUDA tensors), natively and under `gpumem run`: the child reads
the parent's values and writes into the same memory, which the parent then sees.

Usage: python3 bench/gpu/ipc_spawn_check.py [--methods spawn,forkserver]
Exit: 0 every method shared the memory both ways, 1 a method failed, 4 no CUDA device.
"""
import argparse
import sys

import torch
import torch.multiprocessing as mp


def child(t, q):
    try:
        seen = float(t.sum().item())
        t.fill_(3.0)  # written here, read by the parent
        torch.cuda.synchronize()
        q.put(("ok", seen))
    except Exception as e:  # noqa: BLE001 (reported to the parent, which fails the check)
        q.put(("error", repr(e)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", default="spawn,forkserver")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("ipc_spawn_check: no CUDA device", file=sys.stderr)
        return 4
    failed = 0
    for method in args.methods.split(","):
        ctx = mp.get_context(method)
        t = torch.full((3 << 18,), 2.0, device="cuda")  # 3 MiB of float32
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(t, q))
        p.start()
        status, value = q.get(timeout=120)
        p.join(120)
        back = float(t.sum().item())
        ok = status == "ok" and value == 2.0 * t.numel() and back == 3.0 * t.numel() and p.exitcode == 0
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} ipc_spawn_check {method}: child saw {value}, parent sees {back}, "
              f"child exit {p.exitcode}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
