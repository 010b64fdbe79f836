"""Records new allocation workloads natively with _record_memory_history and writes gpumem-trace files.

Usage (on the GPU machine): python3 bench/gpu/record_workloads.py NAME OUT.jsonl.gz (OUT "-": run only and
print the peaks, as under `gpumem run --limit`), NAME one of the
functions below (gpt2_generate, pipeline3, detection, gpt2_beam, llama_gqa, t5_beam, convnext_varres,
bert_serve, vit40, maskrcnn_varres, unet_varres, moe_generate, bart_sample, lm_accum_ckpt,
gpt2_sample_long, serve_continuous, llama_lora, rlhf_loop, gpt2_sample_seeded (seed RW_SEED), bert_anylen,
moe_train, gnn_varsize, compile_dynamic, multistream_serve (threads RW_THREADS), spec_decode, offload_train;
static_generate, bucket_graphs, prefetch_train of record_more.py).
Prints PyTorch's own peak reserved / allocated / requested bytes and segment count beside the event count."""
import gzip, json, sys, time, random, os
import torch

LOSSES = []  # training workloads add each step's loss: run with OUT "-", native and under gpumem, and compare

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

def maskrcnn_varres():
    """Mask R-CNN training then inference, images of random sizes and counts, a random number of boxes."""
    import torchvision
    torch.manual_seed(0); random.seed(8)
    m = torchvision.models.detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=20).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    for step in range(14):
        n = random.choice([1, 2, 3, 5])
        imgs, tg = [], []
        for _ in range(n):
            h, w = random.randint(256, 1000), random.randint(256, 1100)
            k = random.randint(1, 12)
            xy = torch.rand(k, 2, device="cuda") * torch.tensor([w * 0.6, h * 0.6], device="cuda")
            wh = 16 + torch.rand(k, 2, device="cuda") * torch.tensor([w * 0.3, h * 0.3], device="cuda")
            masks = torch.zeros(k, h, w, dtype=torch.uint8, device="cuda")
            masks[:, h // 4:h // 2, w // 4:w // 2] = 1
            imgs.append(torch.rand(3, h, w, device="cuda"))
            tg.append({"boxes": torch.cat([xy, xy + wh], 1), "labels": torch.randint(1, 20, (k,), device="cuda"), "masks": masks})
        m.train()
        loss = sum(m(imgs, tg).values()); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del loss, imgs, tg
        if step % 3 == 2:
            m.eval()
            with torch.no_grad():
                m([torch.rand(3, random.randint(300, 900), random.randint(300, 900), device="cuda") for _ in range(random.choice([1, 4]))])

def unet_varres():
    """A diffusion-style conv UNet trained on random resolutions and batches, bf16 autocast."""
    torch.manual_seed(0); random.seed(9)
    nn = torch.nn
    def block(i, o): return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(8, o), nn.SiLU(), nn.Conv2d(o, o, 3, padding=1), nn.GroupNorm(8, o), nn.SiLU())
    class UNet(nn.Module):
        def __init__(self, ch=(64, 128, 256, 512)):
            super().__init__()
            self.inp = nn.Conv2d(4, ch[0], 3, padding=1)
            self.down = nn.ModuleList(block(ch[i], ch[i + 1]) for i in range(len(ch) - 1))
            self.mid = block(ch[-1], ch[-1])
            self.up = nn.ModuleList(block(ch[i + 1] * 2, ch[i]) for i in reversed(range(len(ch) - 1)))
            self.out = nn.Conv2d(ch[0], 4, 3, padding=1)
        def forward(self, x):
            x = self.inp(x); skips = []
            for d in self.down:
                x = d(x); skips.append(x); x = nn.functional.avg_pool2d(x, 2)
            x = self.mid(x)
            for u in self.up:
                s = skips.pop(); x = nn.functional.interpolate(x, size=s.shape[-2:]); x = u(torch.cat([x, s], 1))
            return self.out(x)
    m = UNet().cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for step in range(24):
        b = random.choice([2, 4, 8, 12]); r = random.choice([32, 48, 64, 96, 128])
        x = torch.randn(b, 4, r, r, device="cuda"); noise = torch.randn_like(x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(m(x + noise).float(), noise)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del x, noise, loss

def moe_generate():
    """A Mixtral-style mixture-of-experts decoder sampling: tokens per expert vary every step."""
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(0); random.seed(10)
    cfg = MixtralConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                        num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000,
                        max_position_embeddings=4096)
    m = MixtralForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    generate_rounds(m, [1, 3, 8, 16], [40, 300, 900], [64, 150], 32000, do_sample=True, top_p=0.9)

def bart_sample():
    """BART-large shape encoder-decoder: sampled summaries of random inputs, batch and lengths drawn."""
    from transformers import BartConfig, BartForConditionalGeneration
    torch.manual_seed(0); random.seed(11)
    m = BartForConditionalGeneration(BartConfig()).cuda().half().eval()
    generate_rounds(m, [1, 4, 9, 16], [80, 300, 700], [50, 120], 50000, do_sample=True, top_k=40)

def lm_accum_ckpt():
    """GPT-2 medium shape training with activation checkpointing and 3-step gradient accumulation,
    sequence length drawn per micro-batch."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0); random.seed(12)
    m = GPT2LMHeadModel(GPT2Config(n_layer=24, n_embd=1024, n_head=16)).cuda()
    m.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for step in range(30):
        b = random.choice([2, 4, 8]); n = random.choice([128, 256, 512, 1000])
        ids = torch.randint(0, 50000, (b, n), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(input_ids=ids, labels=ids).loss / 3
        loss.backward()
        if step % 3 == 2:
            opt.step(); opt.zero_grad(set_to_none=True)
        del ids, loss

def gpt2_sample_long():
    """GPT-2 small shape top-p sampling, long outputs, batches drawn from odd sizes."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0); random.seed(13)
    m = GPT2LMHeadModel(GPT2Config()).cuda().half().eval()
    generate_rounds(m, [3, 7, 13], [23, 180, 610], [300, 420], 50000, do_sample=True, top_p=0.95)

def serve_continuous():
    """Naive continuous batching: up to 12 requests decode one token each per round, each with its own KV
    cache growing by concatenation; a finished request leaves and a new one (prompt 16-700) is prefilled."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0); random.seed(14)
    m = GPT2LMHeadModel(GPT2Config()).cuda().half().eval()
    def admit():
        ids = torch.randint(0, 50000, (1, random.choice([16, 60, 200, 333, 700])), device="cuda")
        out = m(input_ids=ids, use_cache=True)
        return {"cache": out.past_key_values, "tok": out.logits[:, -1:].argmax(-1), "left": random.randint(20, 300)}
    with torch.no_grad():
        active = [admit() for _ in range(8)]
        for rnd in range(260):
            for r in active:
                out = m(input_ids=r["tok"], past_key_values=r["cache"], use_cache=True)
                r["cache"], r["tok"], r["left"] = out.past_key_values, out.logits[:, -1:].argmax(-1), r["left"] - 1
            active = [r for r in active if r["left"] > 0]
            while len(active) < 12 and random.random() < 0.5:
                active.append(admit())

def llama_lora():
    """LoRA fine-tuning of a frozen bf16 Llama-shaped model (1B shape), rank-16 adapters on q and v,
    gradient checkpointing, sequence length and batch drawn per step."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0); random.seed(15)
    m = LlamaForCausalLM(LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                                     num_attention_heads=16, num_key_value_heads=4, vocab_size=32000))
    m = m.to(torch.bfloat16).cuda()
    for p in m.parameters(): p.requires_grad_(False)
    class Lora(torch.nn.Module):
        def __init__(self, base):
            super().__init__(); self.base = base
            self.a = torch.nn.Parameter(torch.randn(16, base.in_features, device="cuda") * 0.01)
            self.b = torch.nn.Parameter(torch.zeros(base.out_features, 16, device="cuda"))
        def forward(self, x):
            return self.base(x) + (x.float() @ self.a.t() @ self.b.t()).to(x.dtype)
    for layer in m.model.layers:
        layer.self_attn.q_proj = Lora(layer.self_attn.q_proj); layer.self_attn.v_proj = Lora(layer.self_attn.v_proj)
    m.gradient_checkpointing_enable(); m.enable_input_require_grads()
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)
    for step in range(24):
        b = random.choice([1, 2, 4]); n = random.choice([200, 512, 900, 1500])
        ids = torch.randint(0, 32000, (b, n), device="cuda")
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del ids, loss

def rlhf_loop():
    """RLHF-style loop: a policy samples continuations, a frozen reference scores them, the policy trains
    on the result; generation's KV cache and training activations alternate at drawn lengths."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0); random.seed(16)
    policy = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda()
    ref = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda().half().eval()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    for it in range(10):
        b = random.choice([4, 8, 12]); p = random.choice([32, 120, 300]); new = random.choice([48, 96, 160])
        ids = torch.randint(0, 50000, (b, p), device="cuda")
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            seq = policy.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                                  do_sample=True, top_k=50, pad_token_id=0)
            ref_lp = torch.log_softmax(ref(seq).logits.float(), -1).gather(-1, seq.unsqueeze(-1)).squeeze(-1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lp = torch.log_softmax(policy(seq).logits.float(), -1).gather(-1, seq.unsqueeze(-1)).squeeze(-1)
        loss = ((lp - ref_lp) ** 2)[:, p:].mean()
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del ids, seq, ref_lp, lp, loss

def gpt2_sample_seeded():
    """generate_more.py's gpt2_sample (GPT-2 small shape, fp16, top-k sampling, batch {2, 5, 11}, prompt
    {17, 129, 400}, 200 new tokens) with the seed from RW_SEED: is its 1.0366 the class or one layout?"""
    from transformers import GPT2Config, GPT2LMHeadModel
    seed = int(os.environ.get("RW_SEED", "2"))
    torch.manual_seed(seed); random.seed(seed)
    m = GPT2LMHeadModel(GPT2Config()).cuda().half().eval()
    with torch.no_grad():
        for _ in range(12):
            b, p = random.choice([2, 5, 11]), random.choice([17, 129, 400])
            ids = torch.randint(0, 50257, (b, p), device="cuda")
            m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=200, min_new_tokens=200,
                       pad_token_id=0, do_sample=True, top_k=50)

def bert_anylen():
    """BERT-base masked-LM training, fp16 autocast, batch 4-48 and length any integer 8-512 drawn per step:
    nearly every activation size is new."""
    from transformers import BertConfig, BertForMaskedLM
    torch.manual_seed(0); random.seed(17)
    m = BertForMaskedLM(BertConfig()).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for step in range(40):
        b, n = random.randint(4, 48), random.randint(8, 512)
        ids = torch.randint(0, 30000, (b, n), device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = m(input_ids=ids, labels=ids).loss
        LOSSES.append(loss.item())
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del ids, loss

def moe_train():
    """Mixture-of-experts training (8 experts, top-2 routing, d 1024, FFN 4096, 6 layers, bf16 autocast):
    the tokens each expert gets vary every step and every layer."""
    torch.manual_seed(0); random.seed(18)
    d, f, E, L = 1024, 4096, 8, 6
    class Moe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = torch.nn.Linear(d, E)
            self.w1 = torch.nn.ModuleList(torch.nn.Linear(d, f) for _ in range(E))
            self.w2 = torch.nn.ModuleList(torch.nn.Linear(f, d) for _ in range(E))
            self.attn = torch.nn.MultiheadAttention(d, 16, batch_first=True)
        def forward(self, x):
            x = x + self.attn(x, x, x, need_weights=False)[0]
            t = x.reshape(-1, d)
            w, idx = torch.topk(torch.softmax(self.gate(t).float() + torch.randn(t.shape[0], E, device=t.device), -1), 2)
            out = torch.zeros_like(t)
            for e in range(E):
                rows, k = torch.nonzero(idx == e, as_tuple=True)
                if rows.numel():
                    h = self.w2[e](torch.nn.functional.gelu(self.w1[e](t[rows])))
                    out = out.index_add(0, rows, (h * w[rows, k].unsqueeze(1)).to(out.dtype))
            return x + out.reshape(x.shape)
    m = torch.nn.Sequential(*[Moe() for _ in range(L)]).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for step in range(30):
        b, n = random.choice([2, 4, 8]), random.randint(64, 1024)
        x = torch.randn(b, n, d, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = m(x).float().pow(2).mean()
        LOSSES.append(loss.item())
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del x, loss

def gnn_varsize():
    """Message passing on random graphs (3 layers, 256 features, Adam): nodes 5,000-200,000 and 4-16 edges
    per node drawn per step, so gathers, scatters and activations take sizes from a continuum."""
    torch.manual_seed(0); random.seed(19)
    ws = [torch.nn.Linear(256, 256).cuda() for _ in range(3)]
    head = torch.nn.Linear(256, 8).cuda()
    opt = torch.optim.Adam([p for w in ws + [head] for p in w.parameters()], lr=1e-3)
    for step in range(40):
        nn_ = random.randint(5_000, 200_000); ne = nn_ * random.randint(4, 16)
        x = torch.randn(nn_, 256, device="cuda")
        src = torch.randint(0, nn_, (ne,), device="cuda"); dst = torch.randint(0, nn_, (ne,), device="cuda")
        h = x
        for w in ws:
            msg = w(h)[src]
            h = torch.relu(torch.zeros_like(h).index_add_(0, dst, msg) / 8 + h)
        loss = torch.nn.functional.cross_entropy(head(h), torch.randint(0, 8, (nn_,), device="cuda"))
        LOSSES.append(loss.item())
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del x, src, dst, h, msg, loss

def compile_dynamic():
    """torch.compile (inductor, dynamic shapes) training of a 6-layer transformer encoder, batch and length
    drawn per step: inductor's own buffer planning instead of eager's tensor-by-tensor allocations."""
    torch.manual_seed(0); random.seed(20)
    layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, dropout=0.0)
    m = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 6), torch.nn.Linear(768, 32000)).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    step_fn = torch.compile(lambda x, y: torch.nn.functional.cross_entropy(m(x).flatten(0, 1).float(), y.flatten()),
                            dynamic=True)
    for step in range(30):
        b, n = random.choice([4, 8, 16]), random.randint(32, 512)
        x = torch.randn(b, n, 768, device="cuda"); y = torch.randint(0, 32000, (b, n), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        LOSSES.append(loss.item())
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del x, y, loss

def multistream_serve():
    """Threaded serving: 6 threads, each with a CUDA stream of its own, run GPT-2 small fp16 forwards of
    drawn batch (1-8) x length (16-512) and read the next token back; memory is allocated and freed on six
    streams at once, so each stream's pool grows and shrinks with its own requests. RW_THREADS sets the
    number of threads (default 6)."""
    import threading
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config()).cuda().half().eval()
    threads_n = int(os.environ.get("RW_THREADS", "6"))
    tokens = [0] * threads_n
    def serve(i):
        rng = random.Random(100 + i)
        stream, gen = torch.cuda.Stream(), torch.Generator("cuda").manual_seed(100 + i)
        with torch.no_grad(), torch.cuda.stream(stream):
            for _ in range(40):
                ids = torch.randint(0, 50000, (rng.randint(1, 8), rng.randint(16, 512)), device="cuda", generator=gen)
                tokens[i] += int(m(ids).logits[:, -1].argmax(-1).sum().item())
    threads = [threading.Thread(target=serve, args=(i,)) for i in range(threads_n)]
    for t in threads: t.start()
    for t in threads: t.join()
    LOSSES.append(float(sum(tokens)))

def spec_decode():
    """Speculative (assisted) decoding: a GPT-2 medium shape target, greedy, proposals from a 4-layer draft
    that shares its embeddings and first layers (so part of each proposal is accepted), prompts of 16-600
    tokens drawn: every round the draft proposes, the target verifies, and both KV caches are cut back to
    the accepted length. Greedy: the token sum must equal native's."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0); random.seed(5)
    target = GPT2LMHeadModel(GPT2Config(n_layer=24, n_embd=1024, n_head=16)).cuda().half().eval()
    draft = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=1024, n_head=16)).cuda().half().eval()
    draft.load_state_dict(target.state_dict(), strict=False)  # h.4 and above are the target's alone
    tokens = 0
    with torch.no_grad():
        for _ in range(10):
            p = random.randint(16, 600)
            ids = torch.randint(0, 50000, (1, p), device="cuda")  # assisted generation takes batch 1 only
            out = target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft, max_new_tokens=120,
                                  min_new_tokens=120, do_sample=False, pad_token_id=0)
            tokens += int(out[:, p:].sum().item())
    LOSSES.append(float(tokens))

def offload_train():
    """Activation offload: a 12-layer transformer encoder (d 1024) trained with its activations saved to
    pinned host memory (torch.autograd.graph.save_on_cpu) and copied back for the backward pass, batch 2-16
    and length 64-1024 drawn per step, bf16 autocast, AdamW."""
    torch.manual_seed(0); random.seed(23)
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, dropout=0.0)
    m = torch.nn.Sequential(torch.nn.Embedding(32000, 1024), torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False),
                            torch.nn.Linear(1024, 32000)).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    for step in range(30):
        b, n = random.randint(2, 16), random.randint(64, 1024)
        ids = torch.randint(0, 32000, (b, n), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16), torch.autograd.graph.save_on_cpu(pin_memory=True):
            logits = m(ids)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, 32000), ids.view(-1))
        LOSSES.append(loss.item())
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del ids, logits, loss

if __name__ == "__main__":
    name, out = sys.argv[1], sys.argv[2]
    if name not in globals():  # the workloads of record_more.py
        sys.modules.setdefault("record_workloads", sys.modules["__main__"]); import record_more; globals()[name] = getattr(record_more, name)
    if out == "-":  # only run it (e.g. under `gpumem run --limit`): no history, the peaks printed
        t = time.time(); globals()[name](); torch.cuda.synchronize()
        print(f"{name}: peak allocated {torch.cuda.max_memory_allocated()} reserved {torch.cuda.max_memory_reserved()}, "
              f"took {time.time()-t:.1f}s" + (f", losses {len(LOSSES)} sum {sum(LOSSES):.6f} last {LOSSES[-1]:.6f}" if LOSSES else ""))
        driver = {k[len("gpumem.driver."):]: v for k, v in torch.cuda.memory_stats().items() if k.startswith("gpumem.driver.")}
        if driver:  # under gpumem: its driver calls and the milliseconds they took on the program's threads
            print(f"{name}: gpumem driver " + ", ".join(f"{k} {v}" for k, v in sorted(driver.items())))
    else:
        start(); t = time.time(); globals()[name](); finish(name, out); print(f"{name} took {time.time()-t:.1f}s")
