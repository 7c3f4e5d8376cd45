#!/usr/bin/env python3
"""The peer of bench/whisper_bench.cc: transformers' WhisperForConditionalGeneration with
whisper-base's shapes (random weights) on the same work, in the torch_peer.py line format:
    <workload> <mode> <ms> ms/step <items/s> <unit>
whisper_train: one AdamW step on 8 windows of 30 s (3000 frames) with 64-token labels on a GPU, 1
on the CPU; whisper_transcribe: greedy generate() of exactly 64 new tokens for one window (its KV
cache; prompt <|startoftranscript|><|en|><|transcribe|><|notimestamps|>). Modes: eager_fp32,
eager_bf16 (the model in bf16 for generation; bf16 autocast over f32 weights for training),
compile_bf16 (training under torch.compile). Timing: warm-up, then the median of three runs
(torch_peer.py's protocol).

    python3 bench/whisper_peer.py [--device cuda|cpu] [--modes eager_fp32,eager_bf16,compile_bf16]
"""
import argparse

import torch
import transformers as tf

from peer_timing import median_seconds, print_peak, train_seconds

ap = argparse.ArgumentParser()
ap.add_argument('--device', default='cuda')
ap.add_argument('--modes', default='eager_fp32,eager_bf16,compile_bf16')
ap.add_argument('--workloads', default='train,transcribe')
args = ap.parse_args()
dev = torch.device(args.device)
gpu = args.device == 'cuda'
FRAMES, TARGET = 3000, 64


def model():
    c = tf.WhisperConfig(vocab_size=51865, num_mel_bins=80, d_model=512, encoder_layers=6, encoder_attention_heads=8,
                         decoder_layers=6, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                         decoder_start_token_id=50258, eos_token_id=50257, pad_token_id=50257)
    c._attn_implementation = 'sdpa'
    m = tf.WhisperForConditionalGeneration(c).to(dev)
    m.generation_config = tf.GenerationConfig(
        decoder_start_token_id=50258, eos_token_id=50257, pad_token_id=50257, no_timestamps_token_id=50363,
        is_multilingual=True, lang_to_id={'<|en|>': 50259}, task_to_id={'transcribe': 50359, 'translate': 50358},
        suppress_tokens=[], begin_suppress_tokens=[])
    return m


for mode in args.modes.split(','):
    bf16 = 'bf16' in mode
    compiled = mode.startswith('compile')
    if 'train' in args.workloads:
        B = 8 if gpu else 1
        m = model().train()
        m.model.encoder.embed_positions.requires_grad_(False)
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-5, fused=gpu)
        features = 0.5 * torch.randn(B, 80, FRAMES, device=dev)
        labels = torch.randint(0, 50000, (B, TARGET), device=dev)

        def forward(m=m, features=features, labels=labels):
            with torch.autocast(args.device, dtype=torch.bfloat16, enabled=bf16):
                return m(input_features=features, labels=labels).loss
        fwd = torch.compile(forward) if compiled else forward
        sec = train_seconds(fwd, opt, gpu)
        print('%-19s %-14s %10.3f ms/step %10.1f audio-s/s' % ('whisper_train', mode, sec * 1e3, B * 30 / sec),
              flush=True)
        print_peak('whisper_train', mode, gpu, 19)
    if 'transcribe' in args.workloads and not compiled:
        m = model().eval()
        if bf16:
            m = m.to(torch.bfloat16)
        features = (0.5 * torch.randn(1, 80, FRAMES, device=dev)).to(torch.bfloat16 if bf16 else torch.float32)

        def gen(m=m, features=features):
            with torch.no_grad():
                return m.generate(features, language='en', task='transcribe', max_new_tokens=TARGET,
                                  min_new_tokens=TARGET, do_sample=False, num_beams=1)
        sec = median_seconds(gen, 1, 3 if gpu else 1, gpu)
        print('%-19s %-14s %10.3f ms/step %10.1f tok/s' % ('whisper_transcribe', mode, sec * 1e3, TARGET / sec),
              flush=True)
