"""Generation workloads the engine was not tuned on, for recording traces (GPUMEM_TRACE) on the GPU:

  llama_gqa: a Llama-style decoder with grouped-query attention (hidden 2048, 16 layers, 16 heads, 4 KV
             heads, MLP 5632, vocab 32000), random weights, bf16; greedy `generate`, batch from {1, 3, 6, 12},
             prompt from {50, 200, 700}, 128 new tokens.
  gpt2_beam: GPT-2 medium shape (24 layers, d 1024), random weights, fp16; beam search (4 beams), batch
             from {1, 2, 4}, prompt from {64, 300}, 64 new tokens: the KV cache is reordered every step.
  gpt2_sample: GPT-2 small shape, fp16, top-k sampling with a fixed seed, batch from {2, 5, 11}, prompt from
             {17, 129, 400}, 200 new tokens.

Each runs --calls generate calls (default 12, random.seed(1)) and prints peak allocated and reserved bytes."""
import argparse
import random

import torch


def model_for(name):
    import transformers as tf

    if name == "llama_gqa":
        cfg = tf.LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=4,
                             intermediate_size=5632, vocab_size=32000, max_position_embeddings=4096)
        return tf.LlamaForCausalLM(cfg).to(torch.bfloat16), 32000
    if name == "gpt2_beam":
        cfg = tf.GPT2Config(n_layer=24, n_embd=1024, n_head=16)
        return tf.GPT2LMHeadModel(cfg).half(), 50257
    cfg = tf.GPT2Config()
    return tf.GPT2LMHeadModel(cfg).half(), 50257


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["llama_gqa", "gpt2_beam", "gpt2_sample"])
    ap.add_argument("--calls", type=int, default=12)
    args = ap.parse_args()
    random.seed(1)
    torch.manual_seed(1)
    model, vocab = model_for(args.workload)
    model = model.cuda().eval()
    shapes = {"llama_gqa": ([1, 3, 6, 12], [50, 200, 700], 128), "gpt2_beam": ([1, 2, 4], [64, 300], 64),
              "gpt2_sample": ([2, 5, 11], [17, 129, 400], 200)}[args.workload]
    with torch.no_grad():
        for _ in range(args.calls):
            b, p = random.choice(shapes[0]), random.choice(shapes[1])
            ids = torch.randint(0, vocab, (b, p), device="cuda")
            kw = dict(max_new_tokens=shapes[2], min_new_tokens=shapes[2], pad_token_id=0)
            if args.workload == "gpt2_beam":
                kw.update(num_beams=4, do_sample=False)
            elif args.workload == "gpt2_sample":
                kw.update(do_sample=True, top_k=50)
            else:
                kw.update(do_sample=False)
            model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    torch.cuda.synchronize()
    print(f"{args.workload}: peak allocated {torch.cuda.max_memory_allocated()} reserved {torch.cuda.max_memory_reserved()}")


if __name__ == "__main__":
    main()
