#!/usr/bin/env python3
"""The peer of bench/vit_bench.cc: Hugging Face's ViTForImageClassification (random weights,
ViT-B/16 shapes: 224 × 224 images, 1000 labels) on the same batches, in the torch_peer.py line
format:
    <workload> <mode> <ms> ms/step <images/s> img/s
Workloads as vit_bench's: vit_infer (the logits of 64 images on a GPU, 4 on the CPU), vit_train
(one AdamW step on cross-entropy, 32 images on a GPU, 2 on the CPU). Modes: eager_fp32,
eager_bf16 (the model in bf16 for inference; bf16 autocast over f32 weights for training),
compile_bf16 (the same under torch.compile), with transformers' sdpa attention. Timing:
warm-up steps, then the median of three runs (torch_peer.py's protocol).

    python3 bench/vit_peer.py [--device cuda|cpu] [--modes eager_fp32,eager_bf16,compile_bf16]
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


def model():
    c = tf.ViTConfig(num_labels=1000, attn_implementation='sdpa')
    return tf.ViTForImageClassification(c).to(dev)


def report(workload, mode, sec, batch):
    print('%-14s %-14s %10.3f ms/step %10.1f img/s' % (workload, mode, sec * 1e3, batch / sec), flush=True)


for mode in args.modes.split(','):
    bf16 = 'bf16' in mode
    compiled = mode.startswith('compile')
    if 'infer' in args.workloads:
        B = 64 if gpu else 4
        m = model().eval()
        if bf16:
            m = m.to(torch.bfloat16)
        x = torch.randn(B, 3, 224, 224, device=dev, dtype=torch.bfloat16 if bf16 else torch.float32)

        def infer(m=m, x=x):
            with torch.no_grad():
                return m(pixel_values=x).logits
        step = torch.compile(infer) if compiled else infer
        report('vit_infer', mode, median_seconds(step, WARM, ITERS, gpu), B)
    if 'train' in args.workloads:
        B = 32 if gpu else 2
        m = model().train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=gpu)
        x = torch.randn(B, 3, 224, 224, device=dev)
        y = (torch.arange(B, device=dev) * 37) % 1000

        def forward(m=m, x=x, y=y):
            with torch.autocast(args.device, dtype=torch.bfloat16, enabled=bf16):
                return m(pixel_values=x, labels=y).loss
        fwd = torch.compile(forward) if compiled else forward

        def train_step():
            opt.zero_grad(set_to_none=True)
            fwd().backward()
            opt.step()
        report('vit_train', mode, median_seconds(train_step, WARM, ITERS, gpu), B)
        if gpu:
            print('%-14s %-14s peak %.0f MiB' % ('vit_train', mode, torch.cuda.max_memory_allocated() / 2**20))
            torch.cuda.reset_peak_memory_stats()
