#!/usr/bin/env python3
"""The peer of bench/t5_bench.cc: transformers' T5ForConditionalGeneration with Flan-T5-base's
shapes (random weights) on the same work, in the torch_peer.py line format:
    <workload> <mode> <ms> ms/step <items/s> <unit>
t5_train: one AdamW step on 16 pairs (sources of 256 tokens, targets of 64) on a GPU, 1 on the
CPU; t5_generate: greedy generate() of exactly 64 new tokens for one source of 256 (its KV
cache). Modes: eager_fp32, eager_bf16 (the model in bf16 for generation; bf16 autocast over f32
weights for training), compile_bf16 (training under torch.compile). Timing: warm-up, then the
median of three runs (torch_peer.py's protocol).

    python3 bench/t5_peer.py [--device cuda|cpu] [--modes eager_fp32,eager_bf16,compile_bf16]
"""
import argparse

import torch
import transformers as tf

from peer_timing import median_seconds, print_peak, train_seconds

ap = argparse.ArgumentParser()
ap.add_argument('--device', default='cuda')
ap.add_argument('--modes', default='eager_fp32,eager_bf16,compile_bf16')
ap.add_argument('--workloads', default='train,generate')
args = ap.parse_args()
dev = torch.device(args.device)
gpu = args.device == 'cuda'
SOURCE, TARGET = 256, 64


def model():
    c = tf.T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_heads=12, num_layers=12,
                    num_decoder_layers=12, feed_forward_proj='gated-gelu', dropout_rate=0.0,
                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    c.tie_word_embeddings = False
    c._attn_implementation = 'sdpa'
    return tf.T5ForConditionalGeneration(c).to(dev)


for mode in args.modes.split(','):
    bf16 = 'bf16' in mode
    compiled = mode.startswith('compile')
    if 'train' in args.workloads:
        B = 16 if gpu else 1
        m = model().train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=gpu)
        ids = torch.randint(3, 32000, (B, SOURCE), device=dev)
        labels = torch.randint(3, 32000, (B, TARGET), device=dev)

        def forward(m=m, ids=ids, labels=labels):
            with torch.autocast(args.device, dtype=torch.bfloat16, enabled=bf16):
                return m(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
        fwd = torch.compile(forward) if compiled else forward
        sec = train_seconds(fwd, opt, gpu)
        print('%-14s %-14s %10.3f ms/step %10.1f tok/s' % ('t5_train', mode, sec * 1e3, B * (SOURCE + TARGET) / sec),
              flush=True)
        print_peak('t5_train', mode, gpu, 14)
    if 'generate' in args.workloads and not compiled:
        m = model().eval()
        if bf16:
            m = m.to(torch.bfloat16)
        ids = torch.randint(3, 32000, (1, SOURCE), device=dev)

        def gen(m=m, ids=ids):
            with torch.no_grad():
                return m.generate(input_ids=ids, max_new_tokens=TARGET, min_new_tokens=TARGET, do_sample=False,
                                  num_beams=1)
        sec = median_seconds(gen, 1, 3 if gpu else 1, gpu)
        print('%-14s %-14s %10.3f ms/step %10.1f tok/s' % ('t5_generate', mode, sec * 1e3, TARGET / sec), flush=True)
