#!/usr/bin/env python3
"""The peer of bench/bert_bench.cc: Hugging Face's BertModel and BertForSequenceClassification
(random weights, BERT-base shapes) on the same batches, in the torch_peer.py line format:
    <workload> <mode> <ms> ms/step <sequences/s> seq/s
Workloads as bert_bench's: bert_embed (row i holds 64 + (53·i mod 65) of 128 tokens, attention
mask, mean pooling, unit length), bert_full (every row 128 tokens, no mask), bert_train (one
AdamW step of a 2-label classifier on the masked batch). Modes: eager_fp32, eager_bf16 (the
model in bf16 for inference; bf16 autocast over f32 weights for training), compile_bf16 (the
same under torch.compile), with transformers' sdpa attention. Timing: warm-up steps, then the
median of three runs (torch_peer.py's protocol).

    python3 bench/bert_peer.py [--device cuda|cpu] [--modes eager_fp32,eager_bf16,compile_bf16]
"""
import argparse

import torch
import transformers as tf

from peer_timing import median_seconds

ap = argparse.ArgumentParser()
ap.add_argument('--device', default='cuda')
ap.add_argument('--modes', default='eager_fp32,eager_bf16,compile_bf16')
ap.add_argument('--workloads', default='embed,full,train')
args = ap.parse_args()
dev = torch.device(args.device)
gpu = args.device == 'cuda'
B, T = (32, 128) if gpu else (8, 128)
WARM, ITERS = (5, 20) if gpu else (1, 2)


def batch(full):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (B, T), generator=g)
    ids[:, 0] = 101
    mask = torch.ones(B, T, dtype=torch.long)
    if not full:
        for i in range(B):
            n = 64 + (53 * i) % 65
            ids[i, n:] = 0
            mask[i, n:] = 0
    return ids.to(dev), mask.to(dev), (torch.arange(B) % 2).to(dev)


def config(labels=0):
    c = tf.BertConfig(attn_implementation='sdpa')
    if labels:
        c.num_labels = labels
    return c


def report(workload, mode, sec):
    print('%-14s %-14s %10.3f ms/step %10.1f seq/s' % (workload, mode, sec * 1e3, B / sec), flush=True)


for mode in args.modes.split(','):
    bf16 = 'bf16' in mode
    compiled = mode.startswith('compile')
    for workload in ('embed', 'full'):
        if workload not in args.workloads:
            continue
        full = workload == 'full'
        model = tf.BertModel(config(), add_pooling_layer=False).to(dev).eval()
        if bf16:
            model = model.to(torch.bfloat16)
        ids, mask, _ = batch(full)

        def embed(ids=ids, mask=mask, model=model, full=full):
            with torch.no_grad():
                h = model(input_ids=ids, attention_mask=None if full else mask).last_hidden_state
                if full:
                    pooled = h.mean(1)
                else:
                    m = mask.unsqueeze(-1).to(h.dtype)
                    pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(pooled.float(), dim=-1)
        step = torch.compile(embed) if compiled else embed
        report('bert_' + workload, mode, median_seconds(step, WARM, ITERS, gpu))
    if 'train' in args.workloads:
        model = tf.BertForSequenceClassification(config(2)).to(dev).train()
        for m in model.modules():  # the same function as bert_bench's: no dropout
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=gpu)
        ids, mask, labels = batch(False)

        def forward(ids=ids, mask=mask, labels=labels, model=model):
            with torch.autocast(args.device, dtype=torch.bfloat16, enabled=bf16):
                return model(input_ids=ids, attention_mask=mask, labels=labels).loss
        fwd = torch.compile(forward) if compiled else forward

        def train_step():
            opt.zero_grad(set_to_none=True)
            fwd().backward()
            opt.step()
        report('bert_train', mode, median_seconds(train_step, WARM, ITERS, gpu))
        if gpu:
            print('%-14s %-14s peak %.0f MiB' % ('bert_train', mode, torch.cuda.max_memory_allocated() / 2**20))
            torch.cuda.reset_peak_memory_stats()
