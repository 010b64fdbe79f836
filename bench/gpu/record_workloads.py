"""Records new allocation workloads natively with _record_memory_history and writes gpumem-trace files.

Usage (on the GPU machine): python3 bench/gpu/record_workloads.py NAME OUT.jsonl.gz, NAME one of the
functions below (gpt2_generate, pipeline3, detection, gpt2_beam, llama_gqa, t5_beam, convnext_varres,
bert_serve, vit40).
Prints PyTorch's own peak reserved / allocated / requested bytes and segment count beside the event count."""
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

def generate_rounds(m, batches, prompts, news, vocab, **kw):
    """Six `generate` calls, each of a batch, prompt length and new-token count drawn from the lists."""
    for r in range(6):
        b = random.choice(batches); p = random.choice(prompts); new = random.choice(news)
        ids = torch.randint(0, vocab, (b, p), device="cuda")
        with torch.no_grad():
            m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, pad_token_id=0, **kw)

def gpt2_beam():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0); random.seed(3)
    m = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda().half().eval()
    generate_rounds(m, [1, 2, 4, 8], [32, 100, 256], [40, 96], 50000, num_beams=4)

def llama_gqa():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0); random.seed(4)
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=12, num_attention_heads=16,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
    m = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    generate_rounds(m, [1, 4, 8, 16, 24], [64, 200, 512, 1000], [48, 128, 200], 32000, do_sample=True)

def t5_beam():
    from transformers import T5Config, T5ForConditionalGeneration
    torch.manual_seed(0); random.seed(5)
    m = T5ForConditionalGeneration(T5Config(d_model=768, d_ff=3072, num_layers=12, num_heads=12, vocab_size=32128,
                                            decoder_start_token_id=0)).cuda().to(torch.bfloat16).eval()
    generate_rounds(m, [2, 4, 8, 16], [64, 200, 512], [32, 80], 32000, num_beams=3)

def convnext_varres():
    import timm
    torch.manual_seed(0); random.seed(6)
    m = timm.create_model("convnext_tiny", num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for step in range(16):
        b = random.choice([16, 32, 64, 96]); r = random.choice([160, 192, 224, 256, 288])
        x = torch.randn(b, 3, r, r, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (b,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(x).float(), y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

def bert_serve():
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0); random.seed(7)
    m = BertForSequenceClassification(BertConfig()).cuda().half().eval()
    for r in range(300):
        b = random.choice([1, 2, 4, 8, 16, 32, 64]); n = random.choice([16, 32, 64, 128, 256, 384, 512])
        ids = torch.randint(0, 30000, (b, n), device="cuda")
        with torch.no_grad():
            m(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.sum().item()

def vit40():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train, torchvision
    random.seed(0); torch.manual_seed(0); gen = torch.Generator().manual_seed(0)
    model = torchvision.models.vit_b_16().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for batch in train.vit_steps(40, gen):  # as train.py's loop does it
        torch.cuda.synchronize()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(batch[0]).float(), batch[1])
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(); loss.item()
        del loss, batch

if __name__ == "__main__":
    name = sys.argv[1]
    start(); t = time.time(); globals()[name](); finish(name, sys.argv[2]); print(f"{name} took {time.time()-t:.1f}s")
