"""Hugging Face `generate` with a static KV cache, which `generate` compiles itself with
torch.compile(mode="reduce-overhead") (CUDA graphs over a preallocated cache: the common fast path for LLM
decoding), run natively and under `gpumem run`: the generated tokens must be equal (greedy decoding)
and the memory figures are printed.

    python3 bench/gpu/static_cache_generate.py [--out result.json]
    gpumem run -- python3 bench/gpu/static_cache_generate.py [--out result.json]

A Llama-shaped model of random weights (4 layers, hidden 1024, 16 heads, 4 KV heads, bf16), batch 4,
prompt 64 tokens, 128 new tokens, three calls (the first compiles). TORCHDYNAMO_DISABLE=1 runs the same
program eagerly (no graphs), to tell the graphs' part in a difference. Exit: 0 ran, 1 failed."""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=512)
    model = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 32000, (4, 64), generator=gen).cuda()
    sums, times = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=128, do_sample=False, cache_implementation="static",
                             pad_token_id=0)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        sums.append(int(out[:, 64:].sum()))
    stats = torch.cuda.memory_stats()
    result = {"allocator": torch.cuda.get_allocator_backend(), "token_sums": sums, "seconds": times,
              "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
              "peak_requested": stats.get("requested_bytes.all.peak", 0)}
    print(json.dumps(result))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
