"""Data-integrity fuzz: random tensors on several streams under real, queued CUDA work; every byte checked.

An allocator that reuses, lends (stitches), shares or unmaps memory too early corrupts data silently, and
only when kernels are still queued. This program makes that likely: each stream runs a spin kernel
(torch.cuda._sleep) before most operations, tensors of 512 B to 512 MiB are filled with their own value,
read on other streams (record_stream) and freed while that work is queued, empty_cache() runs now and then,
and under a limit (gpumem run --limit) out-of-memory errors are caught, answered by freeing, and counted.
A read on another stream records, on that stream, whether it saw the right value; every live tensor is
checked every --check-every steps and at the end. Exit 0 when every check held, 1 at the first wrong byte.

  python3 bench/gpu/integrity_fuzz.py [--steps N] [--seed S] [--streams K] [--max-live-mib M] [--json F]
"""
import argparse
import json
import random
import sys
import time

import torch

MiB = 1 << 20


def size_of(rng):
    kind = rng.random()
    if kind < 0.35:
        return rng.randint(1, 2048) * 512  # small pool: up to 1 MiB
    if kind < 0.85:
        return rng.randint(2048, 48 * 2048) * 512  # 1-48 MiB: part-pages, stitching
    return rng.randint(48 * 2048, 512 * 2048) * 512  # 48-512 MiB: large pages


def same(t, value):
    # A one-element answer on the current stream; a reduction needs no tensor as large as t (limits).
    lo, hi = torch.aminmax(t)
    return (lo == value) & (hi == value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--streams", type=int, default=3)
    ap.add_argument("--max-live-mib", type=int, default=1536)
    ap.add_argument("--check-every", type=int, default=250)
    ap.add_argument("--empty-cache", type=float, default=0.01, help="share of steps that call empty_cache()")
    ap.add_argument("--json", help="write the counts here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    streams = [torch.cuda.current_stream()] + [torch.cuda.Stream() for _ in range(args.streams - 1)]
    live = {}  # key -> [tensor, value, stream index]
    reads = []  # (bool tensor on the reading stream, what it read)
    counts = dict(allocs=0, frees=0, cross_reads=0, rewrites=0, empty_cache=0, ooms=0, checks=0, bytes_checked=0)
    live_bytes = 0
    t0 = time.time()

    def spin(stream):
        if rng.random() < 0.6:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(rng.randint(1_000, 400_000))  # cycles: up to ~0.2 ms of queued work

    def drop(key):
        nonlocal live_bytes
        live_bytes -= live[key][0].numel()
        del live[key]
        counts["frees"] += 1

    def check_all(where):
        results = []
        for key, (t, value, s) in live.items():
            with torch.cuda.stream(streams[s]):
                results.append((key, same(t, value)))
            counts["bytes_checked"] += t.numel()
        torch.cuda.synchronize()
        for key, ok in results:
            if not bool(ok):
                sys.exit(f"integrity_fuzz: tensor {key} ({live[key][0].numel()} bytes) lost its value ({where})")
        for ok, what in reads:
            if not bool(ok):
                sys.exit(f"integrity_fuzz: a read on another stream saw a wrong value ({what})")
        reads.clear()
        counts["checks"] += 1

    for step in range(args.steps):
        op = rng.random()
        if op < 0.45 or not live:
            n = size_of(rng)
            while live and live_bytes + n > args.max_live_mib * MiB:
                drop(rng.choice(list(live)))
            s = rng.randrange(len(streams))
            spin(streams[s])
            value = rng.randint(1, 255)
            try:
                with torch.cuda.stream(streams[s]):
                    t = torch.empty(n, dtype=torch.uint8, device="cuda")
                    t.fill_(value)
            except torch.cuda.OutOfMemoryError as e:
                counts["ooms"] += 1
                if counts["ooms"] <= 3:  # what the allocator said, for a look at its state then
                    print(f"integrity_fuzz: step {step}: {str(e)[:600]}", file=sys.stderr)
                for key in rng.sample(list(live), max(1, len(live) // 3)) if live else []:
                    drop(key)
                continue
            live[f"t{step}"] = [t, value, s]
            live_bytes += n
            counts["allocs"] += 1
        elif op < 0.78:
            drop(rng.choice(list(live)))
        elif op < 0.92:
            # Read on another stream, then free at once on the owner: the memory must wait for the read.
            key = rng.choice(list(live))
            t, value, s = live[key]
            other = rng.randrange(len(streams))
            if other == s:
                other = (s + 1) % len(streams)
            streams[other].wait_stream(streams[s])
            spin(streams[other])
            try:
                with torch.cuda.stream(streams[other]):
                    reads.append((same(t, value), f"{key}, {t.numel()} bytes, value {value}"))
            except torch.cuda.OutOfMemoryError:
                counts["ooms"] += 1
                continue
            t.record_stream(streams[other])
            counts["cross_reads"] += 1
            if rng.random() < 0.7:
                drop(key)  # the allocator must hold the memory until the read is done
            else:
                streams[s].wait_stream(streams[other])  # the owner's next write comes after the read
        elif op < 1 - args.empty_cache:
            key = rng.choice(list(live))
            t, _, s = live[key]
            spin(streams[s])
            live[key][1] = rng.randint(1, 255)
            with torch.cuda.stream(streams[s]):
                t.fill_(live[key][1])
            counts["rewrites"] += 1
        else:
            torch.cuda.empty_cache()
            counts["empty_cache"] += 1
        t = None  # a dropped tensor must not live on in this name (the live-bytes cap counts on it)
        if step % args.check_every == args.check_every - 1:
            check_all(f"step {step}")
    check_all("end")
    counts["seconds"] = round(time.time() - t0, 1)
    counts["peak_reserved_mib"] = torch.cuda.max_memory_reserved() // MiB
    counts["peak_allocated_mib"] = torch.cuda.max_memory_allocated() // MiB
    # Under gpumem: its driver calls and the time in them, by kind (absent natively).
    counts.update({k[7:]: v for k, v in torch.cuda.memory_stats().items() if k.startswith("gpumem.driver.")})
    print("integrity_fuzz: every check held: " + json.dumps(counts))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(counts, f)


if __name__ == "__main__":
    main()
