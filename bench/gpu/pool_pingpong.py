"""A tensor of the small pool and one of the large pool in turn, each freed at once, with nothing else held:
the only free pages pass between gpumem's two pools every round (issue 7: driver calls per round; the old
mappings this left piled up until a round cost a walk over all of them). Prints microseconds per round and
checks each tensor's contents. Run natively and under `gpumem run`.

Usage: python3 bench/gpu/pool_pingpong.py [--rounds N] [--small BYTES] [--large BYTES]
Exit: 0 every tensor held what was written, 1 a tensor lost its data, 4 no CUDA device.
"""
import argparse
import sys
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=3000001)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("pool_pingpong: no CUDA device", file=sys.stderr)
        return 4
    sizes = [args.small, args.large]
    bad = 0
    for phase in ("warm-up", "timed"):
        rounds = 200 if phase == "warm-up" else args.rounds
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(rounds):
            t = torch.empty(sizes[i % 2], dtype=torch.uint8, device="cuda")
            t.fill_(i % 251)
            if i % 997 == 0 and not bool((t == i % 251).all()):
                bad += 1
            del t
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) * 1e6 / rounds
    reserved = torch.cuda.memory_reserved()
    print(f"pool_pingpong: {args.rounds} rounds of {args.small} B and {args.large} B: {us:.2f} us per round, "
          f"reserved {reserved} B, {bad} tensors lost their data")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
