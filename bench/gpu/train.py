"""Training workloads for scripts/gpu-check.sh: the same program runs natively and under `gpumem run`, and the
two runs are compared step by step (losses, step times, peak memory).

  lm:     transformer LM, vocab 32000, d_model 1024, 8 nn.TransformerEncoderLayer (16 heads, ff 4096, norm_first,
          batch_first, causal), AdamW lr 1e-4, bf16 autocast, sequence length drawn from
          {128, ..., 2048} with batch = 16384 // length (random.seed(0)).
  resnet: torchvision ResNet-50, channels_last, SGD momentum 0.9, bf16 autocast, batch drawn from
          {16, 32, 48, 64, 96, 128, 160} at 224x224 (random.seed(0)).
  vit:    torchvision ViT-B/16, AdamW, bf16 autocast, batch drawn from {32, 64, 96, 128, 192}.
  generate: HF GPT-2 (12 layers, d 768, random weights, fp16) `generate` with its growing KV cache: each
          "step" is one generate call, batch from {1, 2, 4, 8, 16}, prompt {32, 100, 256, 511}, 96 new tokens;
          its "loss" is the sum of the generated token ids (greedy decoding: equal runs give equal sums).

Writes one JSON object to --out: allocator, losses, step_ms, driver_ms (gpumem: per step), peak_live (requested bytes), peak_allocated,
peak_reserved. Under gpumem the stats come from gpumem_torch (install() patches torch.cuda's names)."""
import argparse
import json
import random
import sys
import time

import torch
import torch.nn as nn


def lm_model():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(32000, 1024)
            layer = nn.TransformerEncoderLayer(1024, 16, 4096, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, 8, enable_nested_tensor=False)
            self.head = nn.Linear(1024, 32000)

        def forward(self, tokens):
            n = tokens.shape[1]
            mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
            return self.head(self.blocks(self.embed(tokens), mask=mask, is_causal=True))

    return LM()


def lm_steps(steps, gen):
    lengths = [128, 256, 384, 512, 768, 1024, 1536, 2048]
    for _ in range(steps):
        n = random.choice(lengths)
        tokens = torch.randint(0, 32000, (16384 // n, n + 1), generator=gen).cuda(non_blocking=True)
        yield tokens[:, :-1], tokens[:, 1:]


def resnet_steps(steps, gen):
    batches = [16, 32, 48, 64, 96, 128, 160]
    for _ in range(steps):
        b = random.choice(batches)
        x = torch.randn(b, 3, 224, 224, generator=gen).cuda(non_blocking=True).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (b,), generator=gen).cuda(non_blocking=True)
        yield x, y


def vit_steps(steps, gen):
    for _ in range(steps):
        b = random.choice([32, 64, 96, 128, 192])
        x = torch.randn(b, 3, 224, 224, generator=gen).cuda(non_blocking=True)
        y = torch.randint(0, 1000, (b,), generator=gen).cuda(non_blocking=True)
        yield x, y


def generate_steps(steps, gen):
    for _ in range(steps):
        b, p = random.choice([1, 2, 4, 8, 16]), random.choice([32, 100, 256, 511])
        yield torch.randint(0, 50000, (b, p), generator=gen).cuda(non_blocking=True), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["lm", "resnet", "vit", "generate"])
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    random.seed(0)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    torch.backends.cudnn.benchmark = False
    if args.workload == "lm":
        steps = args.steps or 24
        model = lm_model().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        data = lm_steps(steps, gen)

        def loss_of(batch):
            x, y = batch
            return nn.functional.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
    elif args.workload == "vit":
        import torchvision
        steps = args.steps or 16
        model = torchvision.models.vit_b_16().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        data = vit_steps(steps, gen)

        def loss_of(batch):
            x, y = batch
            return nn.functional.cross_entropy(model(x).float(), y)
    elif args.workload == "generate":
        from transformers import GPT2Config, GPT2LMHeadModel
        steps = args.steps or 10
        model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda().half().eval()
        opt = None
        data = generate_steps(steps, gen)

        def loss_of(batch):
            ids, _ = batch
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=96, min_new_tokens=96,
                                     do_sample=False, pad_token_id=0)
            return out[:, ids.shape[1]:].sum().float()
    else:
        import torchvision
        steps = args.steps or 20
        model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        data = resnet_steps(steps, gen)

        def loss_of(batch):
            x, y = batch
            return nn.functional.cross_entropy(model(x).float(), y)

    gpumem = sys.modules.get("gpumem_torch")
    installed = bool(gpumem and gpumem.is_installed())

    def driver_us():  # gpumem's time in driver calls so far (create, map, access, unmap, release, sync)
        stats = gpumem.memory_stats()
        return sum(v for k, v in stats.items() if k.startswith("gpumem.driver.") and k.endswith(".us"))

    losses, step_ms, driver_ms = [], [], []
    for batch in data:
        before = driver_us() if installed else 0
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=opt is not None):
            loss = loss_of(batch)
        if opt is not None:
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        if installed:
            driver_ms.append((driver_us() - before) / 1e3)
        losses.append(loss.item())
        del loss, batch

    stats = gpumem.memory_stats() if installed else torch.cuda.memory_stats()
    result = {
        "workload": args.workload,
        "allocator": "gpumem" if installed else "native",
        "backend": gpumem.backend_name() if installed else torch.cuda.get_allocator_backend(),
        "losses": losses,
        "step_ms": step_ms,
        "driver_ms": driver_ms,  # gpumem only: ms in driver calls during each step
        "peak_live": stats["requested_bytes.all.peak"],
        "peak_allocated": stats["allocated_bytes.all.peak"],
        "peak_reserved": stats["reserved_bytes.all.peak"],
        "device_allocs": stats.get("num_device_alloc", stats.get("segment.all.allocated", 0)),
        # gpumem only: driver calls per kind and the microseconds spent in them over the whole run
        "driver": {k[len("gpumem.driver."):]: v for k, v in stats.items() if k.startswith("gpumem.driver.")},
        # gpumem only: pages made ahead of need on gpumem's own thread (not in "driver": not the program's time)
        "ahead": {k[len("gpumem.ahead."):]: v for k, v in stats.items() if k.startswith("gpumem.ahead.")},
    }
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(f"{args.workload} {result['allocator']}: {steps} steps, median step {sorted(step_ms)[len(step_ms) // 2]:.1f} ms, "
          f"peak live {result['peak_live'] / 2**30:.3f} GiB, peak reserved {result['peak_reserved'] / 2**30:.3f} GiB")


if __name__ == "__main__":
    main()
