"""tests/data/tiny_qwen2_{gptq,awq,gptq8,fp8,fp8_channel}: tiny random Qwen2 folders whose
decoder Linears are held as GPTQ, AWQ and FP8 checkpoints hold them (packed integer codes, zero
points and f16 scales; E4M3 values and their scales), with the logits transformers computes from
the weights those codes stand for.

    PYTHONPATH=tests/nn python3 tests/io/gen_quantized_fixtures.py [out dir] [--only name,...]

(run on the GPU machine: it needs torch, transformers and safetensors; no quantization library).

The codes are made here (min-max per group of 16 inputs); what the files mean is the formats'
own definition, which the dequantization below follows as AutoGPTQ's and AutoAWQ's readers do:
  - GPTQ: qweight I32 [in / p, out] (p = 32 / bits codes a word, the lowest bits first, input
    rows 8r … 8r + 7 of column o in word [r, o] at 4 bits), qzeros I32 [groups, out / p] (packed
    the same way along the outputs; "checkpoint_format": "gptq" stores each zero point minus
    one, wrapped to the bits), scales F16 [groups, out], g_idx I32 [in] (each input's group;
    with desc_act the groups are not contiguous); w[o, i] = (q − z[g_idx[i]]) · s[g_idx[i]].
  - AWQ ("version": "gemm"): qweight I32 [in, out / 8] and qzeros I32 [groups, out / 8] packed
    along the outputs in the order 0 2 4 6 1 3 5 7 (nibble k of word c holds output
    8c + order[k]), scales F16 [groups, out]; w[o, i] = (q − z) · s of i's group i / 16.
  - FP8 ("quant_method": "fp8", transformers' fine-grained blocks): weight F8_E4M3 [out, in],
    weight_scale_inv F32 [ceil(out / 20), ceil(in / 24)] (weight_block_size [20, 24]: partial
    blocks at the ends); w = float(e4m3) · scale of its block. compressed-tensors' float-quantized
    weights: weight F8_E4M3, weight_scale BF16 [out, 1] (strategy "channel"), and a static
    input_scale the reader leaves aside.
The model's weights are set to those values (f32) before transformers runs it, so the golden
logits are the quantized model's. Fixtures:
  tiny_qwen2_gptq   4 bits, groups of 16, asymmetric (zero points 0 and 15 both occur), v1 zeros
  tiny_qwen2_awq    4 bits, groups of 16, zero points
  tiny_qwen2_gptq8  8 bits, symmetric (zero 128), desc_act: groups of 16 scattered by g_idx
  tiny_qwen2_fp8    E4M3 in blocks of 20 × 24, f32 scales (weight_scale_inv)
  tiny_qwen2_fp8_channel  E4M3 with a bf16 scale a row (compressed-tensors)
logits.safetensors as gen_hf_family_golden.py writes it."""
import json
import os
import sys

import torch
import transformers as tf
from safetensors.torch import load_file, save_file

from golden_file import write_safetensors

args = [a for a in sys.argv[1:] if not a.startswith("--only")]
only = next((a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--only=")), None)
OUT = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "data")
IDS = torch.tensor([[1, 5, 9, 13, 17, 21, 25], [60, 2, 33, 7, 7, 48, 0]])
GS = 16
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def qwen2():
    return tf.Qwen2ForCausalLM(tf.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, initializer_range=0.1,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, max_position_embeddings=16,
        tie_word_embeddings=False, use_sliding_window=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))


def group_of(n_in, permuted, gen):
    """Each input's group: i / 16, or (desc_act) the groups of a random order of the inputs."""
    if not permuted:
        return torch.arange(n_in, dtype=torch.int32) // GS
    perm = torch.randperm(n_in, generator=gen)
    g = torch.empty(n_in, dtype=torch.int32)
    g[perm] = torch.arange(n_in, dtype=torch.int32) // GS
    return g


def quantize(w, g_idx, bits, sym):
    """w [out, in] → codes [out, in], scales [out, G] (f16 values), zeros [out, G]."""
    top = (1 << bits) - 1
    G = int(g_idx.max()) + 1
    scale, zero = torch.empty(w.shape[0], G), torch.empty(w.shape[0], G, dtype=torch.int64)
    for k in range(G):
        cols = w[:, g_idx == k]
        if sym:
            s = (cols.abs().amax(1) / (top // 2)).clamp_min(1e-6)
            z = torch.full((w.shape[0],), (top + 1) // 2, dtype=torch.int64)
        else:
            lo, hi = cols.amin(1), cols.amax(1)
            s = ((hi - lo) / top).clamp_min(1e-6)
            z = None
        scale[:, k] = s.half().float()
        if z is None:
            z = torch.round(-lo / scale[:, k]).clamp(0, top).long()
        zero[:, k] = z
    q = (torch.round(w / scale[:, g_idx]) + zero[:, g_idx]).clamp(0, top).long()
    return q, scale, zero


def pack_words(x, bits, order=None):
    """Rows of codes [n, m] → I32 [n, m / p]: code j of each p in word bits·k (k-th position)."""
    p = 32 // bits
    x = x.long() & ((1 << bits) - 1)
    x = x.reshape(x.shape[0], -1, p)
    if order is not None:
        x = x[:, :, order]
    word = torch.zeros(x.shape[:2], dtype=torch.int64)
    for k in range(p):
        word |= x[:, :, k] << (bits * k)
    return torch.where(word >= 1 << 31, word - (1 << 32), word).to(torch.int32)


def unpack_words(words, bits):
    """I32 [n, m] → codes [n, m·p], word by word, the lowest bits first (as the readers shift)."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    return ((words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)).reshape(words.shape[0], -1)


def gptq_pack(q, scale, zero, g_idx, bits):
    return {"qweight": pack_words(q, bits).t().contiguous(), "qzeros": pack_words((zero - 1).t().contiguous(), bits),
            "scales": scale.t().contiguous().half(), "g_idx": g_idx}


def gptq_dequant(t, bits, n_in):
    """The reader's arithmetic: w [in, out] = (q − (z + 1)) · s through g_idx."""
    mask, shifts = (1 << bits) - 1, torch.arange(0, 32, bits, dtype=torch.int32)
    qw = t["qweight"]  # [in / p, out]: word r holds inputs p·r … p·r + p − 1
    w = ((qw.unsqueeze(1) >> shifts.view(1, -1, 1)) & mask).reshape(-1, qw.shape[1])  # [in, out]
    z = (unpack_words(t["qzeros"], bits) + 1) & mask  # [G, out]
    g = t["g_idx"].long()
    assert w.shape[0] == n_in
    return (w - z[g]).float() * t["scales"].float()[g]


def awq_pack(q, scale, zero):
    return {"qweight": pack_words(q.t().contiguous(), 4, AWQ_ORDER),
            "qzeros": pack_words(zero.t().contiguous(), 4, AWQ_ORDER),
            "scales": scale.t().contiguous().half()}


def awq_dequant(t):
    """The reader's arithmetic: unpack, undo the order (0 4 1 5 2 6 3 7), (q − z) · s."""
    reverse = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])
    w, z = unpack_words(t["qweight"], 4), unpack_words(t["qzeros"], 4)
    idx = (torch.arange(w.shape[1]).view(-1, 8)[:, reverse]).reshape(-1)
    w, z = w[:, idx], z[:, idx]
    return (w - z.repeat_interleave(GS, 0)).float() * t["scales"].float().repeat_interleave(GS, 0)


def fp8_blocks(w, rows, cols):
    """w [out, in] → E4M3 values and f32 scales [ceil(out / rows), ceil(in / cols)] (amax / 448)."""
    out, n = w.shape
    R, C = -(-out // rows), -(-n // cols)
    scale = torch.empty(R, C)
    for r in range(R):
        for c in range(C):
            block = w[r * rows:(r + 1) * rows, c * cols:(c + 1) * cols]
            scale[r, c] = block.abs().amax().clamp_min(1e-12) / 448.0
    full = scale.repeat_interleave(rows, 0)[:out].repeat_interleave(cols, 1)[:, :n]
    return (w / full).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale


def fp8_dequant(q, scale, rows, cols):
    """The reader's arithmetic: float(e4m3) times its block's scale, in f32."""
    out, n = q.shape
    full = scale.float().repeat_interleave(rows, 0)[:out].repeat_interleave(cols, 1)[:, :n]
    return q.to(torch.float32) * full


FIXTURES = {
    "tiny_qwen2_gptq": dict(method="gptq", bits=4, sym=False, desc_act=False),
    "tiny_qwen2_awq": dict(method="awq", bits=4, sym=False, desc_act=False),
    "tiny_qwen2_gptq8": dict(method="gptq", bits=8, sym=True, desc_act=True),
    "tiny_qwen2_fp8": dict(method="fp8", bits=8, sym=True, desc_act=False),
    "tiny_qwen2_fp8_channel": dict(method="compressed-tensors", bits=8, sym=True, desc_act=False),
}

for name, f in FIXTURES.items():
    if only and name not in only:
        continue
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = qwen2().float().eval()
    packed = {}
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        for n, mod in model.named_modules():
            if not n.split(".")[-1] in LINEARS:
                continue
            w = mod.weight.data.float()
            if n == "model.layers.0.self_attn.q_proj":  # zero points 0 and 15: all ≥ 0, all < 0
                w[:4, :GS] = w[:4, :GS].abs() + 0.01
                w[4:8, :GS] = -w[4:8, :GS].abs() - 0.01
            if f["method"] == "fp8":
                q8, scale = fp8_blocks(w, 20, 24)
                mod.weight.data.copy_(fp8_dequant(q8, scale, 20, 24))
                packed.update({n + ".weight": q8, n + ".weight_scale_inv": scale})
                continue
            if f["method"] == "compressed-tensors":
                q8, scale = fp8_blocks(w, 1, w.shape[1])
                scale = scale.to(torch.bfloat16)  # [out, 1], as llm-compressor writes it
                q8 = (w / scale.float()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
                mod.weight.data.copy_(fp8_dequant(q8, scale, 1, w.shape[1]))
                packed.update({n + ".weight": q8, n + ".weight_scale": scale,
                               n + ".input_scale": torch.ones(1)})
                continue
            g_idx = group_of(w.shape[1], f["desc_act"], gen)
            q, scale, zero = quantize(w, g_idx, f["bits"], f["sym"])
            direct = (q - zero[:, g_idx]).float() * scale[:, g_idx]  # [out, in]
            if f["method"] == "gptq":
                t = gptq_pack(q, scale, zero, g_idx, f["bits"])
                values = gptq_dequant(t, f["bits"], w.shape[1]).t()
            else:
                t = awq_pack(q, scale, zero)
                values = awq_dequant(t).t()
            assert torch.equal(values, direct), n  # the packing is what the reader reads
            if name == "tiny_qwen2_gptq" and n.endswith("layers.0.self_attn.q_proj"):
                assert (zero == 0).any() and (zero == 15).any()
            mod.weight.data.copy_(values)
            packed.update({n + "." + k: v for k, v in t.items()})
        logits = model(input_ids=IDS, use_cache=False).logits.float()
        rotary = model.base_model.rotary_emb
        inv_freq = rotary.inv_freq.float().cpu().clone()
        greedy = model.generate(IDS[:1, :3], max_new_tokens=8, do_sample=False, min_new_tokens=8,
                                eos_token_id=None, pad_token_id=0)
    out = os.path.join(OUT, name)
    model.save_pretrained(out, safe_serialization=True)
    path = os.path.join(out, "model.safetensors")
    tensors = load_file(path)
    for k in packed:
        if not k.endswith(".weight"):
            tensors.pop(k.rsplit(".", 1)[0] + ".weight", None)
    tensors.update(packed)
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(out, "config.json")) as fh:
        config = json.load(fh)
    if f["method"] == "gptq":
        config["quantization_config"] = {
            "quant_method": "gptq", "bits": f["bits"], "group_size": GS, "desc_act": f["desc_act"],
            "sym": f["sym"], "true_sequential": True, "damp_percent": 0.01, "static_groups": False,
            "checkpoint_format": "gptq"}
    elif f["method"] == "fp8":
        config["quantization_config"] = {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": [20, 24]}
    elif f["method"] == "compressed-tensors":
        config["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "float-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head"], "kv_cache_scheme": None,
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                            "dynamic": False},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor",
                                      "symmetric": True, "dynamic": False}}}}
    else:
        config["quantization_config"] = {
            "quant_method": "awq", "bits": 4, "group_size": GS, "version": "gemm", "zero_point": True,
            "modules_to_not_convert": None}
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2, sort_keys=True)
        fh.write("\n")
    write_safetensors(os.path.join(out, "logits.safetensors"),
                      {"ids": IDS.to(torch.int32), "logits": logits, "inv_freq": inv_freq,
                       "greedy": greedy.to(torch.int32)},
                      {"attention_scaling": "1.0", "transformers": tf.__version__})
    print("wrote", out, tuple(logits.shape))
