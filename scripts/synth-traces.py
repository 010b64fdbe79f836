#!/usr/bin/env python3
"""Writes synthetic gpumem-trace files of generation patterns no recorded trace covers at these sizes, to
judge the engine by its worst case on workloads it was never tuned on (issue 7).

  kv_cat    Hugging Face's DynamicCache: every decoding step each layer's K and V tensor is replaced by a
            torch.cat one token longer (the new one allocated before the old is freed), beside a small
            temporary; optionally the logits of the step.
  beam      beam search: the same growth, then every cache tensor copied once more at the same size (the
            beams reordered with index_select).

Usage: scripts/synth-traces.py OUTDIR   then   scripts/replay-all.sh-style: gpumem replay --json OUTDIR/*.gz
The header's source names the pattern and its parameters; addresses are synthetic (never reused)."""
import argparse
import gzip
import json
import os
import random


class Trace:
    def __init__(self):
        self.events, self.live, self.next = [], {}, 1 << 40

    def alloc(self, size, stream=0):
        addr = self.next
        self.next += (size + 511) // 512 * 512 + 512
        self.live[addr] = size
        self.events.append(("alloc", addr, size, stream))
        return addr

    def free(self, addr, stream=0):
        self.events.append(("free", addr, self.live.pop(addr), stream))


def kv_cat(tensors, first, grow, steps, logits=0, seed=0):
    t, rng = Trace(), random.Random(seed)
    t.alloc(3 << 20)  # something allocated before the cache (weights, the prompt)
    kv = [t.alloc(first) for _ in range(tensors)]
    size = first
    for _ in range(steps):
        size += grow
        for i in range(tensors):
            token = t.alloc(rng.randint(1 << 10, 1 << 18))  # the new token's K or V
            new = t.alloc(size)
            t.free(kv[i])
            kv[i] = new
            t.free(token)
        if logits:
            t.free(t.alloc(logits))
    return t.events


def beam(tensors, first, grow, steps):
    t = Trace()
    kv = [t.alloc(first) for _ in range(tensors)]
    size = first
    for _ in range(steps):
        size += grow
        for _ in range(2):  # the cat, then the beams' reorder at the same size
            for i in range(tensors):
                new = t.alloc(size)
                t.free(kv[i])
                kv[i] = new
    return t.events


# name: (pattern, arguments). Sizes: GPT-2-small-like caches (12 heads x 64 x fp16 per token and sequence).
PATTERNS = {
    "kv_cat48_3m": (kv_cat, dict(tensors=48, first=3_000_000, grow=7680, steps=300, logits=5 * 50257 * 16)),
    "kv_cat24_big": (kv_cat, dict(tensors=24, first=16 * 12 * 64 * 2 * 100, grow=16 * 12 * 64 * 2, steps=300,
                                  logits=16 * 50257 * 4)),
    "kv_cat60_4m": (kv_cat, dict(tensors=60, first=4_700_000, grow=2048, steps=150)),
    "kv_cat240_1m": (kv_cat, dict(tensors=240, first=1_000_000, grow=4096, steps=200)),
    "beam48_8m": (beam, dict(tensors=48, first=8_000_000, grow=16384, steps=150)),
    "beam24_3m": (beam, dict(tensors=24, first=3_000_000, grow=7680, steps=200)),
}


def write(path, name, events, args):
    with gzip.open(path, "wt") as f:
        source = f"synthetic {name} " + " ".join(f"{k}={v}" for k, v in args.items())
        f.write(json.dumps({"format": "gpumem-trace", "version": 1, "source": source, "device": "synthetic"}) + "\n")
        for t, (op, addr, size, stream) in enumerate(events):
            f.write(json.dumps({"t": t, "op": op, "addr": addr, "size": size, "stream": stream}) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir")
    parser.add_argument("--only", nargs="*", choices=sorted(PATTERNS), help="these patterns only")
    a = parser.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for name in a.only or PATTERNS:
        fn, args = PATTERNS[name]
        path = os.path.join(a.outdir, name + ".jsonl.gz")
        write(path, name, fn(**args), args)
        print(path)


if __name__ == "__main__":
    main()
