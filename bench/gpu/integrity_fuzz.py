"""Data-integrity fuzz: random tensors on several streams under real, queued CUDA work; every byte checked.

An allocator that reuses, lends (stitches), shares or unmaps memory too early corrupts data silently, and
only when kernels are still queued. This program makes that likely: each stream runs a spin kernel
(torch.cuda._sleep) before most operations, tensors of 512 B to 512 MiB are filled with their own value,
read on other streams (record_stream) and freed while that work is queued, empty_cache() runs now and then,
and under a limit (gpumem run --limit) out-of-memory errors are caught, answered by freeing, and counted.
A read on another stream records, on that stream, whether it saw the right value; every live tensor is
checked every --check-every steps and at the end. Exit 0 when every check held, 1 at the first wrong byte.

With --threads T, T threads fuzz at once, on the default stream and on their own (the allocator is called
concurrently: PyTorch drops the GIL inside each operation) and hand each other tensors, so blocks are also
freed by a thread that did not allocate them.

  python3 bench/gpu/integrity_fuzz.py [--steps N] [--seed S] [--streams K] [--threads T] [--max-live-mib M]
                                      [--max-peak-mib P] [--json F]
"""
import argparse
import json
import queue
import random
import sys
import threading
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


HOST_CHECKS = [0]  # checks read back to the host because the device had no room for them (under a limit)


def same(t, value):
    # A one-element answer on the current stream; a reduction needs no tensor as large as t (limits).
    try:
        lo, hi = torch.aminmax(t)
        return (lo == value) & (hi == value)
    except torch.cuda.OutOfMemoryError:
        # At a limit even the check's few bytes may find no room (the 8-thread run ends with the tensors
        # handed over at the end adopted, near the limit): read the tensor back instead, on this stream.
        HOST_CHECKS[0] += 1
        return torch.tensor(bool((t.cpu() == value).all()))


class IntegrityError(Exception):
    pass


class Worker:
    """One thread's fuzz: its own streams, tensors and random sequence. Workers of other threads hand it
    tensors through `inbox` (a tensor freed by a thread other than the one that allocated it)."""

    def __init__(self, args, seed, first_stream, max_live, inbox, peers):
        self.args, self.rng, self.max_live = args, random.Random(seed), max_live
        self.streams = [first_stream] + [torch.cuda.Stream() for _ in range(args.streams - 1)]
        self.inbox, self.peers = inbox, peers
        self.live = {}  # key -> [tensor, value, stream index]
        self.reads = []  # (bool tensor on the reading stream, what it read)
        self.live_bytes = 0
        self.counts = dict(allocs=0, frees=0, cross_reads=0, rewrites=0, empty_cache=0, ooms=0, checks=0,
                           bytes_checked=0, handed=0)

    def spin(self, stream):
        if self.rng.random() < 0.6:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(self.rng.randint(1_000, 400_000))  # cycles: up to ~0.2 ms of queued work

    def drop(self, key):
        self.live_bytes -= self.live[key][0].numel()
        del self.live[key]
        self.counts["frees"] += 1

    def adopt(self):
        # A tensor another thread allocated on its stream: ours now, read and written on our stream 0.
        while self.inbox is not None and not self.inbox.empty():
            t, value, stream, key = self.inbox.get_nowait()
            self.streams[0].wait_stream(stream)
            t.record_stream(self.streams[0])
            self.live[key] = [t, value, 0]
            self.live_bytes += t.numel()

    def check_all(self, where):
        results = []
        for key, (t, value, s) in self.live.items():
            with torch.cuda.stream(self.streams[s]):
                results.append((key, same(t, value)))
            self.counts["bytes_checked"] += t.numel()
        for s in self.streams:
            s.synchronize()
        for key, ok in results:
            if not bool(ok):
                raise IntegrityError(f"tensor {key} ({self.live[key][0].numel()} bytes) lost its value ({where})")
        for ok, what in self.reads:
            if not bool(ok):
                raise IntegrityError(f"a read on another stream saw a wrong value ({what})")
        self.reads.clear()
        self.counts["checks"] += 1

    def allocate(self, step):
        rng, n = self.rng, size_of(self.rng)
        while self.live and self.live_bytes + n > self.max_live:
            self.drop(rng.choice(list(self.live)))
        s = rng.randrange(len(self.streams))
        self.spin(self.streams[s])
        value = rng.randint(1, 255)
        try:
            with torch.cuda.stream(self.streams[s]):
                t = torch.empty(n, dtype=torch.uint8, device="cuda")
                t.fill_(value)
        except torch.cuda.OutOfMemoryError as e:
            self.counts["ooms"] += 1
            if self.counts["ooms"] <= 3:  # what the allocator said, for a look at its state then
                print(f"integrity_fuzz: step {step}: {str(e)[:600]}", file=sys.stderr)
            for key in rng.sample(list(self.live), max(1, len(self.live) // 3)) if self.live else []:
                self.drop(key)
            return
        self.live[f"{id(self)}.{step}"] = [t, value, s]
        self.live_bytes += n
        self.counts["allocs"] += 1

    def cross_read(self):
        # Read on another stream, then free at once on the owner: the memory must wait for the read.
        rng, streams = self.rng, self.streams
        key = rng.choice(list(self.live))
        t, value, s = self.live[key]
        other = rng.randrange(len(streams))
        if other == s:
            other = (s + 1) % len(streams)
        streams[other].wait_stream(streams[s])
        self.spin(streams[other])
        try:
            with torch.cuda.stream(streams[other]):
                self.reads.append((same(t, value), f"{key}, {t.numel()} bytes, value {value}"))
        except torch.cuda.OutOfMemoryError:
            self.counts["ooms"] += 1
            return
        t.record_stream(streams[other])
        self.counts["cross_reads"] += 1
        if rng.random() < 0.7:
            self.drop(key)  # the allocator must hold the memory until the read is done
        else:
            streams[s].wait_stream(streams[other])  # the owner's next write comes after the read

    def hand_over(self):
        # To another thread, which frees it later: a free from a thread that did not allocate.
        key = self.rng.choice(list(self.live))
        t, value, s = self.live.pop(key)
        self.live_bytes -= t.numel()
        self.rng.choice(self.peers).put((t, value, self.streams[s], key))
        self.counts["handed"] += 1

    def run(self):
        args, rng = self.args, self.rng
        for step in range(args.steps):
            self.adopt()
            op = rng.random()
            if op < 0.45 or not self.live:
                self.allocate(step)
            elif op < 0.78:
                self.drop(rng.choice(list(self.live)))
            elif op < 0.92:
                self.cross_read()
            elif self.peers and op < 0.94:
                self.hand_over()
            elif op < 1 - args.empty_cache:
                key = rng.choice(list(self.live))
                t, _, s = self.live[key]
                self.spin(self.streams[s])
                self.live[key][1] = rng.randint(1, 255)
                with torch.cuda.stream(self.streams[s]):
                    t.fill_(self.live[key][1])
                self.counts["rewrites"] += 1
            else:
                torch.cuda.empty_cache()
                self.counts["empty_cache"] += 1
            if step % args.check_every == args.check_every - 1:
                self.check_all(f"step {step}")
        self.check_all("end")


def run_threads(args):
    """--threads workers at once; returns their counts summed. Every worker's first stream is the default
    stream (threads that never pick a stream share it, and so one pool), the others its own."""
    n = args.threads
    inboxes = [queue.Queue() for _ in range(n)] if n > 1 else [None]
    workers = []
    for i in range(n):
        peers = [q for j, q in enumerate(inboxes) if j != i and q is not None]
        seed = args.seed if i == 0 else args.seed * 1000 + i  # one thread: the sequences of earlier runs
        budget = args.max_live_mib * MiB // n
        workers.append(Worker(args, seed, torch.cuda.current_stream(), budget, inboxes[i], peers))
    errors = []

    def body(w):
        try:
            w.run()
        except IntegrityError as e:
            errors.append(str(e))
        except Exception as e:  # noqa: BLE001 - any failure of a worker fails the fuzz, with its reason
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=body, args=(w,)) for w in workers[1:]]
    for t in threads:
        t.start()
    body(workers[0])
    for t in threads:
        t.join()
    if errors:
        sys.exit("integrity_fuzz: " + errors[0])
    # Tensors handed over after their receiver's last check are checked here, by whoever holds them now.
    for w in workers:
        w.adopt()
        w.check_all("after all threads ended")
    return {k: sum(w.counts[k] for w in workers) for k in workers[0].counts}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000, help="steps per thread")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--streams", type=int, default=3, help="streams per thread")
    ap.add_argument("--threads", type=int, default=1, help="threads fuzzing at once (they hand tensors over)")
    ap.add_argument("--max-live-mib", type=int, default=1536, help="live bytes at most, all threads together")
    ap.add_argument("--check-every", type=int, default=250)
    ap.add_argument("--empty-cache", type=float, default=0.01, help="share of steps that call empty_cache()")
    ap.add_argument("--max-peak-mib", type=int, help="fail if the peak allocated exceeds this (a limit's size)")
    ap.add_argument("--json", help="write the counts here")
    args = ap.parse_args()
    t0 = time.time()
    try:
        counts = run_threads(args)
    except IntegrityError as e:
        sys.exit(f"integrity_fuzz: {e}")
    counts["threads"] = args.threads
    counts["host_checks"] = HOST_CHECKS[0]
    counts["seconds"] = round(time.time() - t0, 1)
    counts["peak_reserved_mib"] = torch.cuda.max_memory_reserved() // MiB
    counts["peak_allocated_mib"] = torch.cuda.max_memory_allocated() // MiB
    # Peaks are of states that existed: never more allocated than reserved, nor than a limit allows.
    if torch.cuda.max_memory_allocated() > torch.cuda.max_memory_reserved():
        sys.exit(f"integrity_fuzz: peak allocated {counts['peak_allocated_mib']} MiB exceeds peak reserved "
                 f"{counts['peak_reserved_mib']} MiB")
    if args.max_peak_mib and counts["peak_allocated_mib"] > args.max_peak_mib:
        sys.exit(f"integrity_fuzz: peak allocated {counts['peak_allocated_mib']} MiB exceeds {args.max_peak_mib} MiB")
    # Under gpumem: its driver calls and the time in them, by kind (absent natively).
    counts.update({k[7:]: v for k, v in torch.cuda.memory_stats().items() if k.startswith("gpumem.driver.")})
    print("integrity_fuzz: every check held: " + json.dumps(counts))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(counts, f)


if __name__ == "__main__":
    main()
