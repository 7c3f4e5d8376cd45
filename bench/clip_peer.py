#!/usr/bin/env python3
"""The peer of bench/clip_bench.cc: Hugging Face's CLIPModel (random weights, the default
config: openai/clip-vit-base-patch32's shapes) on the same batches, in the torch_peer.py line
format:
    <workload> <mode> <ms> ms/step <pairs/s> pairs/s
Workloads as clip_bench's: clip_infer (logits_per_image of 64 images against 64 captions of 77
tokens on a GPU, 4 on the CPU), clip_train (one AdamW step on the contrastive loss, 32 pairs on a
GPU, 2 on the CPU). Modes: eager_fp32, eager_bf16 (the model in bf16 for inference; bf16
autocast over f32 weights for training), compile_bf16 (the same under torch.compile), with
transformers' sdpa attention. Timing: warm-up steps, then the median of three runs
(torch_peer.py's protocol).

    python3 bench/clip_peer.py [--device cuda|cpu] [--modes eager_fp32,eager_bf16,compile_bf16]
"""
import argparse

import torch
import transformers as tf

from peer_timing import median_seconds

ap = argparse.ArgumentParser()
ap.add_argument('--device', default='cuda')
ap.add_argument('--modes', default='eager_fp32,eager_bf16,compile_bf16')
ap.add_argument('--workloads', default='infer,train')
args = ap.parse_args()
dev = torch.device(args.device)
gpu = args.device == 'cuda'
WARM, ITERS = (5, 20) if gpu else (1, 2)
TOKENS = 77


def batch(n, eos):
    x = torch.randn(n, 3, 224, 224, device=dev)
    ids = torch.randint(0, eos - 1, (n, TOKENS), device=dev)
    ids[:, -1] = eos  # pooled at the end-of-text token
    return x, ids, torch.ones_like(ids)


def report(workload, mode, sec, n):
    print('%-14s %-14s %10.3f ms/step %10.1f pairs/s' % (workload, mode, sec * 1e3, n / sec), flush=True)


config = tf.CLIPConfig()
config._attn_implementation = 'sdpa'
eos = config.text_config.eos_token_id
for mode in args.modes.split(','):
    bf16 = 'bf16' in mode
    compiled = mode.startswith('compile')
    if 'infer' in args.workloads:
        n = 64 if gpu else 4
        m = tf.CLIPModel(config).to(dev).eval()
        x, ids, mask = batch(n, eos)
        if bf16:
            m, x = m.to(torch.bfloat16), x.to(torch.bfloat16)

        def infer(m=m, x=x, ids=ids, mask=mask):
            with torch.no_grad():
                return m(input_ids=ids, attention_mask=mask, pixel_values=x).logits_per_image
        step = torch.compile(infer) if compiled else infer
        report('clip_infer', mode, median_seconds(step, WARM, ITERS, gpu), n)
    if 'train' in args.workloads:
        n = 32 if gpu else 2
        m = tf.CLIPModel(config).to(dev).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-5, fused=gpu)
        x, ids, mask = batch(n, eos)

        def forward(m=m, x=x, ids=ids, mask=mask):
            with torch.autocast(args.device, dtype=torch.bfloat16, enabled=bf16):
                return m(input_ids=ids, attention_mask=mask, pixel_values=x, return_loss=True).loss
        fwd = torch.compile(forward) if compiled else forward

        def train_step():
            opt.zero_grad(set_to_none=True)
            fwd().backward()
            opt.step()
        report('clip_train', mode, median_seconds(train_step, WARM, ITERS, gpu), n)
        if gpu:
            print('%-14s %-14s peak %.0f MiB' % ('clip_train', mode, torch.cuda.max_memory_allocated() / 2**20))
            torch.cuda.reset_peak_memory_stats()
