#!/usr/bin/python3
"""Generates tests/data/gpt_golden.bin: a PyTorch (float64) reference of three AdamW
training steps of the `addition_3L` GPT, which tests/nn/gpt_parity_test.cc replays with
tensorgrad's nn::Gpt.

Regenerate (needs torch and numpy; Debian's interpreter has them, the `python3` on PATH
may not):

    /usr/bin/python3 tests/nn/gen_gpt_golden.py

Model (tensorgrad's nn::Gpt with GptConfig{.vocab=16, .seq_len=8, .layers=3, .d_model=64,
.heads=4}): x = wte[ids] + wpe[:T]; per block x += proj(attn(ln1(x))) with one fused
qkv Linear(d, 3d) split [q | k | v], heads [B,T,H,hd] -> [B,H,T,hd], causal
softmax(q kᵀ/√hd) v; x += fc2(gelu_tanh(fc(ln2(x)))); logits = lnf(x) · wteᵀ (tied);
loss = mean cross-entropy over targets != -100. LayerNorm eps 1e-5. Parameter names are
tensorgrad's.

Training: AdamW(lr 3e-3, betas (0.9, 0.999), eps 1e-8), weight decay 0.1 on the rank-2
parameters only (Linear weights, wte, wpe: tensorgrad's default decay flags; two param
groups here), clip_grad_norm_(1.0) before every step (asserted active: the raw norm
exceeds 1), LambdaLR factor (t+1)/3 for t < 3 (tensorgrad's lr::warmup(3)).

Initial parameters. Storing them (151k floats) and full results would not fit a small
file, so the initial parameters come from a generator both sides implement exactly:
splitmix64 from INIT_SEED, one stream over the parameters in the order of the `init`
records, one draw per element in row-major order; draw x gives
    value = float32(offset + ((x >> 40) - 2^23) * 2^-scale_exp)
(24-bit uniform on [-2^(23-scale_exp), 2^(23-scale_exp)) + offset; the double arithmetic is
exact, so the only rounding is the one to float32). Each `init` record carries the sum and
the sum of squares of the float32 values, so a port that draws differently fails at once.

Results. Tensors of at most FULL_MAX elements are stored whole. A larger tensor v of shape
[R, C] is stored as a sketch: row sums  r_i = sum_j s_j v_ij, column sums c_j = sum_i t_i v_ij
(s_j = sign(ROW_SIGN_SEED, j), t_i = sign(COL_SIGN_SEED, i), sign(seed, n) = +1 if the top
bit of mix(seed + n) is 0 else -1, mix = splitmix64's output function), then the values at
SAMPLES indices (k * SAMPLE_STRIDE) mod numel, k = 0..SAMPLES-1; its full L2 norm is in the
header. The sketches carry every element of the tensor (a wrong element shows in its row
and its column sum), and ||r(a) - r(b)|| / ||r(b)|| estimates the norm-wise relative error.

File format: a sequence of records, each an ASCII header line (whitespace-separated
fields, '\\n'-terminated), some followed by a little-endian binary payload:
    # ...                                          comment, no payload
    config KEY VALUE ...                           model/training settings, no payload
    layout FULL_MAX SAMPLES SAMPLE_STRIDE ROW_SIGN_SEED COL_SIGN_SEED INIT_SEED
    ids RANK D0 ..                                 payload: numel int32
    targets RANK D0 ..                             payload: numel int32
    init NAME RANK D0 .. SCALE_EXP OFFSET SUM SUMSQ  no payload (see above)
    step K loss LOSS gradnorm NORM                 starts step K (1..3): LOSS is the loss
                                                   computed before step K's update, NORM
                                                   the raw (pre-clip) global grad norm
    grad NAME RANK D0 .. full|sketch NORM          raw gradient of step K; payload float32
    capture NAME RANK D0 .. full|sketch NORM       forward capture of step K (attention
                                                   probabilities); payload float32
    param NAME RANK D0 .. full|sketch NORM         parameter after step K's update
    end                                            no payload; end of file
Payload of `full`: numel float32. Payload of `sketch` (rank 2 [R, C]): R + C + SAMPLES
float32 (row sums, column sums, samples).
"""
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

VOCAB, SEQ, LAYERS, D, HEADS = 16, 8, 3, 64, 4
BATCH = 4
LR, BETAS, EPS, WD, CLIP, WARMUP, STEPS = 3e-3, (0.9, 0.999), 1e-8, 0.1, 1.0, 3, 3
LN_EPS = 1e-5
IGNORE = -100

FULL_MAX = 1024
SAMPLES = 192
SAMPLE_STRIDE = 997
ROW_SIGN_SEED = 0x5EED0001
COL_SIGN_SEED = 0x5EED0002
INIT_SEED = 20240611
DATA_SEED = 7

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gpt_golden.bin")
M64 = (1 << 64) - 1


# ---- the shared generator --------------------------------------------------------------

def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        return mix(self.state)


def signs(seed, n):
    return np.array([-1.0 if mix((seed + i) & M64) >> 63 else 1.0 for i in range(n)])


# name, shape, scale_exp, offset: value = offset + U[-2^(23-e), 2^(23-e)). Weights larger
# than GPT-2's init, so attention is far from uniform, the loss is not trivial and the
# gradient norm exceeds the clip threshold.
def param_specs():
    specs = [("wte.weight", [VOCAB, D], 24, 0.0),   # U(-0.5, 0.5)
             ("wpe.weight", [SEQ, D], 25, 0.0)]     # U(-0.25, 0.25)
    for i in range(LAYERS):
        b = "blocks.%d." % i
        specs += [
            (b + "ln1.weight", [D], 25, 1.0), (b + "ln1.bias", [D], 26, 0.0),
            (b + "attn.qkv.weight", [3 * D, D], 25, 0.0), (b + "attn.qkv.bias", [3 * D], 27, 0.0),
            (b + "attn.proj.weight", [D, D], 25, 0.0), (b + "attn.proj.bias", [D], 27, 0.0),
            (b + "ln2.weight", [D], 25, 1.0), (b + "ln2.bias", [D], 26, 0.0),
            (b + "fc.weight", [4 * D, D], 25, 0.0), (b + "fc.bias", [4 * D], 27, 0.0),
            (b + "fc2.weight", [D, 4 * D], 26, 0.0), (b + "fc2.bias", [D], 27, 0.0),
        ]
    specs += [("lnf.weight", [D], 25, 1.0), ("lnf.bias", [D], 26, 0.0)]
    return specs


def make_init(specs):
    rng = SplitMix64(INIT_SEED)
    init = {}
    for name, shape, e, offset in specs:
        n = math.prod(shape)
        vals = [offset + ((rng.next() >> 40) - (1 << 23)) * 2.0 ** -e for _ in range(n)]
        init[name] = torch.tensor(np.array(vals, dtype=np.float64).astype(np.float32)).reshape(shape)
    return init


def make_batch():
    # Addition-like: the first positions (the operands) are not scored, and a few
    # scattered targets are ignored too.
    g = torch.Generator().manual_seed(DATA_SEED)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g, dtype=torch.int64)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g, dtype=torch.int64)
    lead = [3, 4, 5, 2]
    for b in range(BATCH):
        targets[b, :lead[b]] = IGNORE
    targets[1, 6] = IGNORE
    targets[3, 4] = IGNORE
    return ids, targets


# ---- the model ---------------------------------------------------------------------------

class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)

    def forward(self, x, probs_out):
        B, T, C = x.shape
        hd = C // HEADS
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.reshape(B, T, HEADS, hd).permute(0, 2, 1, 3) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        probs_out.append(att.detach().clone())
        y = (att @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        return self.proj(y)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D, eps=LN_EPS)
        self.attn = Attn()
        self.ln2 = torch.nn.LayerNorm(D, eps=LN_EPS)
        self.fc = torch.nn.Linear(D, 4 * D)
        self.fc2 = torch.nn.Linear(4 * D, D)

    def forward(self, x, probs_out):
        x = x + self.attn(self.ln1(x), probs_out)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, D)
        self.wpe = torch.nn.Embedding(SEQ, D)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(LAYERS)])
        self.lnf = torch.nn.LayerNorm(D, eps=LN_EPS)

    def forward(self, ids, targets, probs_out):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe.weight[:T]
        for blk in self.blocks:
            x = blk(x, probs_out)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=IGNORE)


# ---- writing ------------------------------------------------------------------------------

def dims(shape):
    return " ".join([str(len(shape))] + [str(d) for d in shape])


def f32(values):
    return np.asarray(values, dtype=np.float64).astype("<f4").tobytes()


def tensor_record(kind, name, t):
    t = t.detach().double()
    v = t.numpy()
    norm = float(np.sqrt(np.sum(v * v)))
    if t.numel() <= FULL_MAX:
        return ("%s %s %s full %r\n" % (kind, name, dims(t.shape), norm)).encode(), f32(v.reshape(-1))
    assert t.dim() == 2, name
    R, C = t.shape
    rows = v @ signs(ROW_SIGN_SEED, C)
    cols = signs(COL_SIGN_SEED, R) @ v
    flat = v.reshape(-1)
    samples = flat[[(k * SAMPLE_STRIDE) % flat.size for k in range(SAMPLES)]]
    return (("%s %s %s sketch %r\n" % (kind, name, dims(t.shape), norm)).encode(),
            f32(np.concatenate([rows, cols, samples])))


def main():
    specs = param_specs()
    init = make_init(specs)
    ids, targets = make_batch()

    model = Gpt()
    names = [n for n, _ in model.named_parameters()]
    assert names == [s[0] for s in specs], names
    with torch.no_grad():
        for n, p in model.named_parameters():
            assert list(p.shape) == list(init[n].shape), n
            p.copy_(init[n].double())

    decayed = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    assert len(decayed) == 2 + 4 * LAYERS
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": WD}, {"params": other, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: (t + 1) / WARMUP if t < WARMUP else 1.0)

    out = []
    head = [
        "# Generated by tests/nn/gen_gpt_golden.py (torch %s, float64); do not edit." % torch.__version__,
        "# Regenerate: /usr/bin/python3 tests/nn/gen_gpt_golden.py",
        "config vocab %d seq_len %d layers %d d_model %d heads %d batch %d ln_eps %r" % (
            VOCAB, SEQ, LAYERS, D, HEADS, BATCH, LN_EPS),
        "config lr %r beta1 %r beta2 %r eps %r weight_decay %r clip %r warmup %d steps %d" % (
            LR, BETAS[0], BETAS[1], EPS, WD, CLIP, WARMUP, STEPS),
        "layout %d %d %d %d %d %d" % (FULL_MAX, SAMPLES, SAMPLE_STRIDE, ROW_SIGN_SEED, COL_SIGN_SEED, INIT_SEED),
    ]
    out += [(h + "\n").encode() for h in head]
    out.append(("ids %s\n" % dims(ids.shape)).encode())
    out.append(ids.numpy().astype("<i4").tobytes())
    out.append(("targets %s\n" % dims(targets.shape)).encode())
    out.append(targets.numpy().astype("<i4").tobytes())
    for name, shape, e, offset in specs:
        v = init[name].double().numpy()
        out.append(("init %s %s %d %r %r %r\n" % (name, dims(shape), e, offset, float(v.sum()),
                                                  float((v * v).sum()))).encode())

    for k in range(1, STEPS + 1):
        opt.zero_grad()
        probs = []
        loss = model(ids, targets, probs)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        assert float(norm) > 2 * CLIP, "clip inactive at step %d (grad norm %r)" % (k, float(norm))
        opt.step()
        sched.step()
        print("step %d: loss %.6f, grad norm %.4f, lr factor now %.3f" % (k, float(loss), float(norm),
                                                                          opt.param_groups[0]["lr"] / LR))
        out.append(("step %d loss %r gradnorm %r\n" % (k, float(loss), float(norm))).encode())
        for n in names:
            out += tensor_record("grad", n, grads[n])
        if k == 1:
            for i, pr in enumerate(probs):
                out += tensor_record("capture", "blocks.%d.attn.probs" % i, pr)
        for n, p in model.named_parameters():
            out += tensor_record("param", n, p)
    out.append(b"end\n")

    data = b"".join(out)
    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    with open(OUT_PATH, "wb") as f:
        f.write(data)
    print("wrote %s (%d bytes)" % (os.path.normpath(OUT_PATH), len(data)))


if __name__ == "__main__":
    main()
