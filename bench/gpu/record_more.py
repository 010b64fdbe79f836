"""More unseen workloads for record_workloads.py (same contract: each appends numbers to LOSSES that must come
out the same natively and under gpumem; run through record_workloads.py NAME OUT or bench/gpu/unseen_check.sh).

static_generate: HF `generate` with a static KV cache, whose decoding forward generate() compiles with
  mode="reduce-overhead" (CUDA graph trees, the fast path HF recommends), greedy, batches and lengths
  drawn; LOSSES gets each call's sum of generated token ids.
bucket_graphs: serving with CUDA graphs captured per batch bucket into one shared pool (as vLLM does),
  replayed with inputs copied in; LOSSES gets each output's sum.
prefetch_train: a CNN trained from pinned host batches copied on a side stream with record_stream, the
  next batch in flight while the current one trains; LOSSES gets each step's loss."""
import random

import torch

from record_workloads import LOSSES


def static_generate():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0); random.seed(5)
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
    m = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    # generate() compiles the decoding forward itself (mode "reduce-overhead": CUDA graph trees) when the
    # cache is static; a forward compiled by hand would have its outputs overwritten by the next replay.
    for _ in range(6):
        b, p, new = random.choice([1, 2, 4]), random.choice([16, 48, 100]), random.choice([24, 64])
        ids = torch.randint(0, 32000, (b, p), device="cuda")
        with torch.no_grad():
            out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, cache_implementation="static", pad_token_id=0)
        LOSSES.append(float(out[:, p:].sum().item()))


def bucket_graphs():
    torch.manual_seed(0); random.seed(6)
    layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, dropout=0.0)
    m = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).cuda().half().eval()
    pool, graphs = torch.cuda.graph_pool_handle(), {}
    side = torch.cuda.Stream()
    with torch.no_grad():
        for b in (32, 16, 8, 4, 2, 1):  # largest first, as serving engines capture, one pool for all
            x = torch.randn(b, 128, 768, device="cuda", dtype=torch.half)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    m(x)  # warm-up on a side stream, as torch.cuda.graph asks
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                y = m(x)
            graphs[b] = (g, x, y)
        scratch = []
        for step in range(200):
            n = random.randint(1, 32)
            b = min(k for k in graphs if k >= n)
            g, x, y = graphs[b]
            x.zero_()
            x[:n].copy_(torch.randn(n, 128, 768, device="cuda", dtype=torch.half))
            g.replay()
            LOSSES.append(float(y[:n].float().sum().item()))
            scratch.append(torch.empty(random.randint(1, 64) << 20, dtype=torch.uint8, device="cuda"))  # eager work between
            if len(scratch) > 4:
                scratch.pop(0)


def prefetch_train():
    import torchvision
    torch.manual_seed(0); random.seed(7)
    m = torchvision.models.resnet18(num_classes=100).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    copy = torch.cuda.Stream()
    batches = [(torch.randn(b, 3, 160, 160).pin_memory(), torch.randint(0, 100, (b,)).pin_memory())
               for b in [random.choice([32, 48, 64, 96]) for _ in range(40)]]

    def fetch(i):
        with torch.cuda.stream(copy):
            x = batches[i][0].to("cuda", non_blocking=True).to(memory_format=torch.channels_last)
            y = batches[i][1].to("cuda", non_blocking=True)
        return x, y

    nxt = fetch(0)
    for i in range(len(batches)):
        torch.cuda.current_stream().wait_stream(copy)
        x, y = nxt
        x.record_stream(torch.cuda.current_stream())
        y.record_stream(torch.cuda.current_stream())
        if i + 1 < len(batches):
            nxt = fetch(i + 1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(x).float(), y)
        LOSSES.append(loss.item())
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        del x, y, loss
