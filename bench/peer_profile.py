"""Where PyTorch's training step spends its GPU time, for comparing with TG_PROFILE=1.

The model is the peer's nanoGPT block (../shared/bench/torch_peer.py), rebuilt here so the
profile runs without the peer's benchmark loop. Usage:
  python3 bench/peer_profile.py gpt2_124M tf32 compile   # or: char_6L384 fp32 eager
Prints the GPU kernels of one step, grouped by name, slowest first.
"""
import sys, torch, torch.nn as nn, torch.nn.functional as F

CONFIGS = {'addition_3L': (16, 8, 3, 64, 4, 512), 'char_6L384': (65, 256, 6, 384, 6, 64),
           'gpt2_124M': (50257, 1024, 12, 768, 12, 16)}

class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__(); s.h = h
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.fc, s.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in s.qkv(s.ln1(x)).split(C, 2))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate='tanh'))

class GPT(nn.Module):
    def __init__(s, V, T, L, d, h):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, d), nn.Embedding(T, d)
        s.blocks = nn.ModuleList([Block(d, h) for _ in range(L)])
        s.lnf, s.head = nn.LayerNorm(d), nn.Linear(d, V, bias=False)
        s.head.weight = s.wte.weight
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks: x = b(x)
        logits = s.head(s.lnf(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))

name, mode, how = sys.argv[1], sys.argv[2], sys.argv[3]
V, T, L, d, h, B = CONFIGS[name]
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = (mode == 'tf32')
torch.manual_seed(0)
m = GPT(V, T, L, d, h).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
fwd = torch.compile(m) if how == 'compile' else m
idx = torch.randint(0, V, (B, T), device='cuda'); tgt = torch.randint(0, V, (B, T), device='cuda')
def step():
    opt.zero_grad(set_to_none=True); fwd(idx, tgt).backward(); opt.step()
for _ in range(4): step()
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    step(); torch.cuda.synchronize()
rows = [(e.key, e.device_time_total, e.count) for e in prof.key_averages() if e.device_time_total > 0]
rows.sort(key=lambda r: -r[1])
total = sum(r[1] for r in rows)
print(f"## torch {name} {mode} {how}: {total/1000:.2f} ms GPU in one step, {sum(r[2] for r in rows)} kernels")
for k, t, c in rows[:int(sys.argv[4]) if len(sys.argv) > 4 else 18]:
    print(f"{t/1000:9.3f} ms {c:5d}x  {k[:150]}")
