"""The CPU peer of bench/decode_bench (gpt2_decode): GPT-2 124M shapes, random weights, batch 1,
a 16-token prompt, greedy decoding with a KV cache written here in plain PyTorch (the
Hugging Face peer needs `transformers`, which a CPU machine may lack). Same protocol and output
format as torch_peer.py: one warm-up generation, then the median of three. PyTorch gets every
logical CPU (torch.set_num_threads(os.cpu_count())), as tensorgrad's OpenMP does.

    python3 bench/decode_peer_cpu.py [new tokens, default 32]
"""
import math
import os
import statistics
import sys
import time

import torch

V, C, L, H, CTX = 50257, 768, 12, 12, 1024
D = C // H


def make_model():
    torch.manual_seed(0)
    def lin(i, o):
        return torch.randn(i, o) * 0.02, torch.zeros(o)
    m = {'wte': torch.randn(V, C) * 0.02, 'wpe': torch.randn(CTX, C) * 0.02, 'blocks': []}
    for _ in range(L):
        m['blocks'].append({'ln1': (torch.ones(C), torch.zeros(C)), 'qkv': lin(C, 3 * C), 'proj': lin(C, C),
                            'ln2': (torch.ones(C), torch.zeros(C)), 'fc': lin(C, 4 * C), 'fc2': lin(4 * C, C)})
    m['lnf'] = (torch.ones(C), torch.zeros(C))
    return m


def forward(m, ids, pos, cache):
    """ids [1, T] at positions pos … pos + T − 1; cache: per layer (k, v) [1, H, CTX, D]."""
    T = ids.shape[1]
    x = m['wte'][ids] + m['wpe'][pos:pos + T]
    for b, (kc, vc) in zip(m['blocks'], cache):
        h = torch.nn.functional.layer_norm(x, (C,), *b['ln1'])
        q, k, v = (h @ b['qkv'][0] + b['qkv'][1]).split(C, dim=-1)
        q, k, v = (t.view(1, T, H, D).transpose(1, 2) for t in (q, k, v))
        kc[:, :, pos:pos + T] = k
        vc[:, :, pos:pos + T] = v
        keys, values = kc[:, :, :pos + T], vc[:, :, :pos + T]
        att = (q @ keys.transpose(-2, -1)) / math.sqrt(D)
        mask = torch.arange(pos + T)[None, :] > (pos + torch.arange(T))[:, None]
        att = att.masked_fill(mask, float('-inf')).softmax(-1)
        y = (att @ values).transpose(1, 2).reshape(1, T, C)
        x = x + y @ b['proj'][0] + b['proj'][1]
        h = torch.nn.functional.layer_norm(x, (C,), *b['ln2'])
        h = torch.nn.functional.gelu(h @ b['fc'][0] + b['fc'][1], approximate='tanh')
        x = x + h @ b['fc2'][0] + b['fc2'][1]
    x = torch.nn.functional.layer_norm(x[:, -1], (C,), *m['lnf'])
    return (x @ m['wte'].t()).argmax(-1)


def main():
    new = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    torch.set_num_threads(os.cpu_count())
    m = make_model()
    prompt = torch.randint(0, V, (1, 16))
    latencies = []

    def generate():
        latencies.clear()
        cache = [(torch.zeros(1, H, CTX, D), torch.zeros(1, H, CTX, D)) for _ in range(L)]
        with torch.no_grad():
            nxt = forward(m, prompt, 0, cache)
            for s in range(new - 1):
                a = time.perf_counter()
                nxt = forward(m, nxt.view(1, 1), 16 + s, cache)
                latencies.append(time.perf_counter() - a)

    generate()
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        generate()
        runs.append(time.perf_counter() - t0)
    sec = statistics.median(runs)
    print(f"torch {torch.__version__} device cpu threads {torch.get_num_threads()}", flush=True)
    print(f"{'gpt2_decode':<22} {'torch_kvloop_b1_' + str(new) + 'tok':<26} {sec * 1e3:10.3f} ms/step {new / sec:14.1f} tokens/s")
    print(f"# gpt2_decode per-token latency (median decode call) {statistics.median(latencies) * 1e3:.3f} ms")


if __name__ == '__main__':
    main()
