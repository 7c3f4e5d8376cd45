#!/usr/bin/env python3
"""The GPU peer of bench/decode_bench.cc: Hugging Face `generate` (greedy, KV cache) on the same
shapes with random weights, a 16-token prompt per sequence, in the torch_peer.py line format:
    <model>_decode <mode> <ms> ms/step <tokens/s> tokens/s
It also measures the device's copy bandwidth (a 1 GiB buffer copied: read + write) and prints
each model's weight-bandwidth floor per token: the bytes of every weight a decode step reads
(all but the token embedding, of which it gathers one row per sequence, unless the head is tied
to it) over that bandwidth.

    python3 bench/decode_peer_gpu.py [--models gpt2,tinyllama,qwen2,qwen3,gpt_oss] [--batches 1,8] [--new 256]
                                     [--dtype bf16|fp32]

gpt_oss (gpt-oss-20b shapes, 21 B parameters) is built on the GPU in the chosen type (in f32 on
the host it would take 84 GB), and its floor counts the experts a token reads: top_k of them.
"""
import argparse
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument('--models', default='gpt2,tinyllama')
ap.add_argument('--batches', default='1,8')
ap.add_argument('--new', type=int, default=256)
ap.add_argument('--dtype', default='bf16', choices=['bf16', 'fp32'])
args = ap.parse_args()
dev = torch.device('cuda')
dtype = torch.bfloat16 if args.dtype == 'bf16' else torch.float32


def copy_bandwidth():
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    reps = 20
    t = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    torch.cuda.synchronize()
    return 2 * n * reps / (time.perf_counter() - t)


def make(name):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    if name == 'gpt2':
        cfg = GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)
        return GPT2LMHeadModel(cfg), 50257, True
    if name == 'qwen2':  # Qwen2.5-0.5B shapes, as decode_bench's qwen2
        from transformers import Qwen2Config, Qwen2ForCausalLM
        cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                          num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=2048,
                          rope_theta=1e6, tie_word_embeddings=True)
        return Qwen2ForCausalLM(cfg), 151936, True
    if name == 'qwen3':  # Qwen3-0.6B shapes, as decode_bench's qwen3
        from transformers import Qwen3Config, Qwen3ForCausalLM
        cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                          num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=2048,
                          rope_theta=1e6, tie_word_embeddings=True)
        return Qwen3ForCausalLM(cfg), 151936, True
    if name == 'gpt_oss':  # gpt-oss-20b shapes, as decode_bench's gpt_oss
        from transformers import GptOssConfig, GptOssForCausalLM
        cfg = GptOssConfig(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
                           num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
                           num_experts_per_tok=4, sliding_window=128, max_position_embeddings=4096,
                           tie_word_embeddings=False)
        torch.set_default_dtype(dtype)
        with torch.device(dev):
            model = GptOssForCausalLM(cfg)
        torch.set_default_dtype(torch.float32)
        return model, 201088, False
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                      num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048)
    return LlamaForCausalLM(cfg), 32000, False


def streamed_bytes(model, tied):
    total = 0
    emb = model.get_input_embeddings().weight
    experts = getattr(model.config, 'num_local_experts', 0)
    for n, p in model.named_parameters():
        if p is emb and not tied:
            continue  # gathered, one row per sequence
        share = model.config.num_experts_per_tok / experts if experts and '.experts.' in n else 1
        total += p.numel() * p.element_size() * share
    return total


bw = copy_bandwidth()
print(f"torch {torch.__version__} gpu {torch.cuda.get_device_name(0)} copy_bandwidth {bw / 1e9:.1f} GB/s",
      flush=True)
for name in filter(None, args.models.split(',')):
    model, vocab, tied = make(name)
    model = model.to(dev, dtype).eval()
    weights = streamed_bytes(model, tied)
    print(f"# {name}_decode weights_read_per_step {weights / 1e9:.3f} GB floor {weights / bw * 1e3:.3f} ms "
          f"({bw / weights:.0f} steps/s)", flush=True)
    for b in map(int, args.batches.split(',')):
        prompt = torch.randint(0, vocab, (b, 16), device=dev)

        def gen():
            with torch.no_grad():
                model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.new,
                               min_new_tokens=args.new, do_sample=False, pad_token_id=0, use_cache=True)
        gen()  # warm-up
        torch.cuda.synchronize()
        times = []
        for _ in range(3):
            t = time.perf_counter()
            gen()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        sec = sorted(times)[1]
        mode = f"hf_generate_b{b}_{args.new}tok_{args.dtype}"
        print(f"{name + '_decode':<22} {mode:<26} {sec * 1e3:10.3f} ms/step {args.new * b / sec:14.1f} tokens/s",
              flush=True)
    del model
    torch.cuda.empty_cache()
