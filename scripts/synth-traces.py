#!/usr/bin/env python3
"""Writes synthetic gpumem-trace files of generation patterns no recorded trace covers at these sizes, to
judge the engine by its worst case on workloads it was never tuned on (issue 7).

  kv_cat    Hugging Face's DynamicCache: every decoding step each layer's K and V tensor is replaced by a
            torch.cat one token longer (the new one allocated before the old is freed), beside a small
            temporary; optionally the logits of the step.
  beam      beam search: the same growth, then every cache tensor copied once more at the same size (the
            beams reordered with index_select).
  serve     continuous batching without paged attention: requests of drawn prompt and output lengths
            arrive and leave; each holds per-layer KV tensors grown by torch.cat every step, beside the
            step's activations and logits sized by the batch.
  varbatch  training with a batch size drawn every step: forward activations sized by it (freed in
            reverse in backward), gradients and optimizer state that stay, an occasional evaluation.
  churn     an allocator torture test: log-uniform sizes from 512 bytes to 256 MiB, lifetimes drawn
            (most short, some long), live bytes held around a target.

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


def serve(layers, per_token, hidden, vocab, slots, steps, seed=0):
    t, rng = Trace(), random.Random(seed)
    t.alloc(64 << 20)  # weights
    requests = []  # [tokens, left, [kv addresses]]
    for _ in range(steps):
        while len(requests) < slots and rng.random() < 0.5:
            prompt = rng.randint(16, 512)
            requests.append([prompt, rng.randint(8, 256), [t.alloc(prompt * per_token) for _ in range(2 * layers)]])
        batch = sum(r[0] for r in requests) or 1
        acts = [t.alloc(batch * hidden * 2) for _ in range(4)]
        for r in requests:
            r[0] += 1
            r[1] -= 1
            for i, old in enumerate(r[2]):
                r[2][i] = t.alloc(r[0] * per_token)
                t.free(old)
        logits = t.alloc(len(requests) * vocab * 4)
        for a in acts:
            t.free(a)
        t.free(logits)
        for r in [r for r in requests if r[1] <= 0]:
            for a in r[2]:
                t.free(a)
            requests.remove(r)
    return t.events


def varbatch(layers, per_sample, params, steps, seed=0):
    t, rng = Trace(), random.Random(seed)
    weights = [t.alloc(params // layers) for _ in range(layers)]
    grads, state = None, None
    for step in range(steps):
        batch = rng.choice([8, 12, 16, 24, 32, 48, 64])
        acts = [t.alloc(batch * per_sample * (1 + (i % 3))) for i in range(layers)]
        if step % 10 == 9:  # evaluation: activations dropped at once, nothing kept
            for a in acts:
                t.free(a)
            continue
        fresh = [t.alloc(w_size) for w_size in [params // layers] * layers] if grads is None else None
        for a in reversed(acts):
            tmp = t.alloc(batch * per_sample)
            t.free(a)
            t.free(tmp)
        if fresh is not None:
            grads = fresh
        if state is None:
            state = [t.alloc(2 * (params // layers)) for _ in range(layers)]
    return t.events


def churn(target, events, seed=0):
    t, rng = Trace(), random.Random(seed)
    live, held = [], 0  # (death, addr, size)
    for now in range(events):
        if held < target or rng.random() < 0.5:
            size = int(2 ** rng.uniform(9, 28)) // 512 * 512 or 512
            life = int(rng.expovariate(1 / 20)) if rng.random() < 0.9 else int(rng.expovariate(1 / 2000))
            live.append((now + life, t.alloc(size), size))
            held += size
        for item in [x for x in live if x[0] <= now]:
            t.free(item[1])
            held -= item[2]
            live.remove(item)
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
    "serve_gpt2": (serve, dict(layers=12, per_token=12 * 64 * 2, hidden=768, vocab=50257, slots=16, steps=600)),
    "serve_llama": (serve, dict(layers=16, per_token=8 * 128 * 2, hidden=2048, vocab=32000, slots=32, steps=400,
                                seed=1)),
    "varbatch_cnn": (varbatch, dict(layers=50, per_sample=3 << 20, params=100 << 20, steps=200)),
    "varbatch_tf": (varbatch, dict(layers=24, per_sample=5_000_000, params=500 << 20, steps=150, seed=2)),
    "churn_1g": (churn, dict(target=1 << 30, events=40_000)),
    "churn_8g": (churn, dict(target=8 << 30, events=40_000, seed=3)),
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
