#!/usr/bin/python3
"""Generates tests/data/mamba_golden.safetensors: a PyTorch (float64) reference of one forward
and backward pass of a 2-layer Mamba language model, which tests/nn/mamba_parity_test.cc
replays with tensorgrad's nn::MambaLM.

Regenerate (needs torch; Debian's interpreter has it, the `python3` on PATH may not):

    /usr/bin/python3 tests/nn/gen_mamba_golden.py

The model is written here from the reference semantics of state-spaces/mamba (the `Mamba`
mixer of mamba_simple.py and `selective_scan_ref` of selective_scan_interface.py, without
their fused kernels), with tensorgrad's parameter names and the depthwise conv weight as
[D, K]:
    h = embedding[ids]; per layer h = h + mixer(rms_norm(h)); logits = rms_norm_f(h) @ embeddingᵀ
    mixer(x): xz = in_proj(x) -> [B, 2·di, L]; x, z = halves; x = silu(causal_conv1d(x) + bias)
              dt, B, C = split(x_proj(x)); dt = dt_proj.weight · dt (bias inside the softplus)
              y = selective_scan_ref(x, dt, -exp(A_log), B, C, D, z, dt_proj.bias, softplus)
              out = out_proj(y)
    loss = mean cross-entropy over targets != -100.
The parameters are random float32 values (torch.Generator seeded below) at scales that keep
every part of the model active; the computation runs in float64 from those float32 values.

The file holds, as F32 (I32 for ids and targets): "param/<name>" (the values used),
"grad/<name>" (d loss / d param, from float64), "ids", "targets"; its metadata holds the
float64 loss as text and the configuration.
"""
import math
import os

import torch
import torch.nn.functional as F

from golden_file import write_safetensors

VOCAB, LAYERS, D_MODEL, D_STATE, D_CONV, EXPAND = 13, 2, 16, 4, 4, 2
BATCH, LEN = 2, 11
D_INNER, DT_RANK = EXPAND * D_MODEL, math.ceil(D_MODEL / 16)
EPS = 1e-5
SEED = 20261121


def params(gen):
    """name -> float32 tensor, in tensorgrad's declaration order."""
    def uni(shape, bound):
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1).mul(bound).float()

    p = {"embedding.weight": torch.randn((VOCAB, D_MODEL), generator=gen, dtype=torch.float64).mul(0.5).float()}
    for i in range(LAYERS):
        pre = f"layers.{i}."
        p[pre + "norm.weight"] = (1 + uni((D_MODEL,), 0.2))
        m = pre + "mixer."
        p[m + "in_proj.weight"] = uni((2 * D_INNER, D_MODEL), 1 / math.sqrt(D_MODEL))
        p[m + "conv1d.weight"] = uni((D_INNER, D_CONV), 0.5)
        p[m + "conv1d.bias"] = uni((D_INNER,), 0.5)
        p[m + "x_proj.weight"] = uni((DT_RANK + 2 * D_STATE, D_INNER), 1 / math.sqrt(D_INNER))
        p[m + "dt_proj.weight"] = uni((D_INNER, DT_RANK), DT_RANK ** -0.5)
        dt = torch.exp(torch.rand((D_INNER,), generator=gen, dtype=torch.float64) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        p[m + "dt_proj.bias"] = (dt + torch.log(-torch.expm1(-dt))).float()
        p[m + "A_log"] = (torch.log(torch.arange(1, D_STATE + 1, dtype=torch.float64)).repeat(D_INNER, 1) + uni((D_INNER, D_STATE), 0.1)).float()
        p[m + "D"] = 1 + uni((D_INNER,), 0.3)
        p[m + "out_proj.weight"] = uni((D_MODEL, D_INNER), 1 / math.sqrt(D_INNER))
    p["norm_f.weight"] = 1 + uni((D_MODEL,), 0.2)
    return p


def selective_scan_ref(u, delta, A, B, C, D, z, delta_bias):
    """state-spaces/mamba's selective_scan_ref (real A, B and C [b, n, l], softplus on)."""
    delta = F.softplus(delta + delta_bias[..., None])
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    x = u.new_zeros((u.shape[0], u.shape[1], A.shape[1]))
    ys = []
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, i]))
    y = torch.stack(ys, dim=2)
    return (y + u * D[:, None]) * F.silu(z)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def mixer(p, m, hidden):
    length = hidden.shape[1]
    xz = (hidden @ p[m + "in_proj.weight"].T).transpose(1, 2)
    x, z = xz.chunk(2, dim=1)
    x = F.conv1d(x, p[m + "conv1d.weight"].unsqueeze(1), p[m + "conv1d.bias"], padding=D_CONV - 1, groups=D_INNER)[..., :length]
    x = F.silu(x)
    x_dbl = x.transpose(1, 2) @ p[m + "x_proj.weight"].T
    dt, Bm, Cm = torch.split(x_dbl, [DT_RANK, D_STATE, D_STATE], dim=-1)
    dt = (dt @ p[m + "dt_proj.weight"].T).transpose(1, 2)
    y = selective_scan_ref(x, dt, -torch.exp(p[m + "A_log"]), Bm.transpose(1, 2), Cm.transpose(1, 2), p[m + "D"], z,
                           p[m + "dt_proj.bias"])
    return y.transpose(1, 2) @ p[m + "out_proj.weight"].T


def loss_of(p, ids, targets):
    h = p["embedding.weight"][ids]
    for i in range(LAYERS):
        h = h + mixer(p, f"layers.{i}.mixer.", rms_norm(h, p[f"layers.{i}.norm.weight"]))
    logits = rms_norm(h, p["norm_f.weight"]) @ p["embedding.weight"].T
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-100)


def main():
    gen = torch.Generator().manual_seed(SEED)
    p32 = params(gen)
    ids = torch.randint(0, VOCAB, (BATCH, LEN), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, VOCAB, (BATCH, LEN), generator=gen, dtype=torch.int64)
    targets[1, 3] = -100  # one ignored target
    p64 = {k: v.double().requires_grad_(True) for k, v in p32.items()}
    loss = loss_of(p64, ids, targets)
    loss.backward()
    tensors = {"ids": ids.int(), "targets": targets.int()}
    for k, v in p32.items():
        tensors["param/" + k] = v
    for k, v in p64.items():
        tensors["grad/" + k] = v.grad.float()
    meta = {"loss": repr(loss.item()), "vocab": str(VOCAB), "layers": str(LAYERS), "d_model": str(D_MODEL),
            "d_state": str(D_STATE), "d_conv": str(D_CONV), "expand": str(EXPAND), "torch": torch.__version__}
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "mamba_golden.safetensors")
    write_safetensors(out, tensors, meta)
    print(f"wrote {os.path.normpath(out)}: loss {loss.item():.10f}, {len(p32)} parameters")


if __name__ == "__main__":
    main()
