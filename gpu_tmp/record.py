"""Records new allocation workloads natively with _record_memory_history and writes gpumem-trace files."""
import gzip, json, sys, time, random, os
import torch

def start():
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=5_000_000, context=None, stacks="python")

def finish(name, out):
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ops = {"alloc": "alloc", "free_requested": "free", "free_completed": "free_completed",
           "segment_alloc": "segment_alloc", "segment_free": "segment_free",
           "segment_map": "segment_map", "segment_unmap": "segment_unmap"}
    n = 0; live = 0; peak = 0; sizes = {}
    with gzip.open(out, "wt") as f:
        f.write(json.dumps({"format": "gpumem-trace", "version": 1,
                            "source": f"pytorch {torch.__version__} {name}",
                            "device": torch.cuda.get_device_name()}) + "\n")
        for i, e in enumerate(snap["device_traces"][0]):
            op = ops.get(e["action"])
            if not op: continue
            t = e.get("time_us", i)
            f.write(json.dumps({"t": t, "op": op, "addr": e["addr"], "size": e["size"], "stream": e.get("stream", 0)}) + "\n")
            n += 1
    st = torch.cuda.memory_stats()
    print(f"{name}: {n} events, native peak reserved {st['reserved_bytes.all.peak']}, "
          f"peak allocated {st['allocated_bytes.all.peak']}, peak requested {st['requested_bytes.all.peak']}, "
          f"segments {st['segment.all.allocated']}", flush=True)

def gpt2_generate():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0); random.seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda().half().eval()
    for r in range(8):
        b = random.choice([1, 2, 4, 8, 16]); p = random.choice([32, 100, 256, 511]); new = random.choice([40, 96, 160])
        ids = torch.randint(0, 50000, (b, p), device="cuda")
        with torch.no_grad():
            m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=True, pad_token_id=0)

def pipeline3():
    torch.manual_seed(0); random.seed(1)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 2048)) for _ in range(6)]).cuda()
    opt = torch.optim.AdamW(model.parameters())
    copy, side = torch.cuda.Stream(), torch.cuda.Stream()
    for step in range(30):
        b = random.choice([256, 512, 1024, 2048, 3000])
        host = torch.randn(b, 2048).pin_memory()
        with torch.cuda.stream(copy):
            x = host.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(copy)
        x.record_stream(torch.cuda.current_stream())
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        if step % 5 == 4:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                ev = torch.randn(random.choice([512, 4096]), 2048, device="cuda")
                out = model(ev).sum()
            torch.cuda.current_stream().wait_stream(side)
            ev.record_stream(side)
            del ev, out
        del x, loss

def detection():
    import torchvision
    torch.manual_seed(0); random.seed(2)
    m = torchvision.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=10).cuda().train()
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    for step in range(12):
        n = random.choice([2, 4, 6])
        imgs = [torch.rand(3, random.randint(300, 900), random.randint(300, 1000), device="cuda") for _ in range(n)]
        tg = [{"boxes": torch.tensor([[10., 20., 100., 200.], [50., 60., 250., 280.]], device="cuda"),
               "labels": torch.tensor([1, 2], device="cuda")} for _ in range(n)]
        loss = sum(m(imgs, tg).values()); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

if __name__ == "__main__":
    name = sys.argv[1]
    start(); t = time.time(); globals()[name](); finish(name, sys.argv[2]); print(f"{name} took {time.time()-t:.1f}s")
