#!/usr/bin/env python3
"""GGUF fixtures for tests/io/gguf_test.cc, written from the tests' Hugging Face fixtures.

GGUF files are written here by a writer of the format's own (struct and numpy; llama.cpp's
`gguf` package is not in Debian), converting as llama.cpp's convert_hf_to_gguf.py converts:
tensor names blk.N.attn_q … , extents innermost first, the rows of q_proj and k_proj reordered
per head for the architecture "llama" (rotate-half pairs (i, i + D/2) made adjacent), Llama 3.1's
RoPE rescaling as the tensor rope_freqs.weight of per-pair divisors, the tokenizer as
tokenizer.ggml.* arrays. Written into tests/data/gguf/:

  tiny_llama.gguf       tests/data/tiny_llama (F32), its tokenizer.json (gpt2 type) and chat template
  tiny_llama3.gguf      tests/data/tiny_llama3 (F32, biases, tied head, rope_freqs.weight)
  tiny_qwen2.gguf, tiny_qwen3.gguf   the same folders (F32; Qwen3's yarn as rope.scaling.*; Qwen2's with
                        an end-of-turn id, 3, beside its eos)
  tiny_gemma.gguf       tests/data/tiny_gemma (norm gains stored as 1 + w, as the converter stores them)
  tiny_gemma2.gguf, tiny_gemma3.gguf   tests/data/gguf/src_gemma2 and src_gemma3, tiny folders with the
                        settings llama.cpp derives rather than reads (gen_gguf_gemma_golden.py)
  tiny_gpt2.gguf        tests/data/tiny_gpt2 (Conv1D weights transposed to [out, in], the head tied)
  tiny_phi3.gguf, tiny_phi3_longrope.gguf   Phi-3's (fused attn_qkv, ffn_up holding gate and up;
                        longrope as rope_factors_long/short.weight, a partial rotation as
                        rope.dimension_count)
  tiny_mixtral.gguf, tiny_qwen2_moe.gguf, tiny_qwen3_moe.gguf   the mixtures (F32; each layer's experts
                        stacked into ffn_gate/up/down_exps, the router ffn_gate_inp, Qwen2-MoE's
                        shared expert *_shexp; their dense layers keep ffn_gate/up/down, which
                        llama.cpp itself would not load)
  tiny_llama_quant.gguf tiny_llama with its matrices in Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, F16 and
                        BF16 (quantized by ggml's reference rules), and
  tiny_llama_quant_expected.safetensors  their values dequantized by numpy, by transformers' names
                        and layouts (q/k rows back in transformers' order)
  tiny_qwen2_moe_quant.gguf  tiny_qwen2_moe with its stacked experts in Q8_0, Q4_1 and F16, and
  tiny_qwen2_moe_quant_expected.safetensors  every weight's value by transformers' names (per expert)
  blocks.gguf           one tensor per quantized type read (2 × 512 values of random blocks with
                        sane f16 scales), and blocks_expected.safetensors their values (numpy)
  tok_<name>.gguf       tests/data/tokenizer/<name>/tokenizer.json as GGUF tokenizer metadata (no
                        tensors): gpt2, llama3, qwen2 (type gpt2, pre gpt-2 / llama-bpe / qwen2),
                        llama2 (type llama: tokens with scores, the merge order as scores), and
                        gpt2_no_pre (gpt2's without tokenizer.ggml.pre: llama.cpp's default, refused)

Usage: /usr/bin/python3 tests/io/gen_gguf_fixtures.py   (needs python3-numpy)
"""
import json
import os
import re
import struct

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
OUT = os.path.join(ROOT, "gguf")

# GGUF value types and ggml tensor types.
U32, I32, F32V, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30
BLOCK = {Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34), Q2_K: (256, 84),
         Q3_K: (256, 110), Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210)}


# ---- safetensors (read and write, f32 / bf16 / f16) ----
def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = np.frombuffer(data[a:b], dtype={"F32": np.float32, "F16": np.float16, "BF16": np.uint16,
                                               "I32": np.int32, "I64": np.int64}[e["dtype"]])
        if e["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.reshape(e["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- GGUF writer ----
def gguf_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, v):
    if vtype == STRING:
        return gguf_string(v)
    if vtype == ARRAY:
        item, items = v
        return struct.pack("<IQ", item, len(items)) + b"".join(gguf_value(item, x) for x in items)
    return struct.pack({U32: "<I", I32: "<i", F32V: "<f", BOOL: "<?", U64: "<Q"}[vtype], v)


def write_gguf(path, kvs, tensors):
    """kvs: [(key, type, value)]; tensors: [(name, ggml type, shape outermost first, raw bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        out += gguf_string(key) + struct.pack("<I", vtype) + gguf_value(vtype, v)
    offset, data = 0, b""
    for name, ttype, shape, raw in tensors:
        out += gguf_string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", e) for e in reversed(shape))
        out += struct.pack("<IQ", ttype, offset)
        data += raw + b"\0" * ((32 - len(raw) % 32) % 32)
        offset = len(data)
    out += b"\0" * ((32 - len(out) % 32) % 32)
    with open(path, "wb") as f:
        f.write(out + data)


# ---- ggml's block types: quantizers (reference rules) for the model, dequantizers for all ----
def f16_bits(x):
    return np.asarray(x, dtype=np.float16).view(np.uint16)


def quantize(ttype, w):
    """Blocks of ggml type `ttype` for w (rows a multiple of 32), ggml's reference rounding."""
    x = w.astype(np.float32).reshape(-1, 32)
    blocks = []
    for b in x:
        if ttype == Q8_0:
            amax = np.abs(b).max()
            d = amax / 127
            v = b * (1 / d if d else 0)
            q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)  # roundf: halves away from zero
            blocks.append(f16_bits(d).tobytes() + q.tobytes())
        elif ttype in (Q4_0, Q5_0):  # d from the value of largest magnitude, sign kept
            top = 8 if ttype == Q4_0 else 16
            m = b[np.argmax(np.abs(b))]
            d = m / -top
            idd = 1 / d if d else 0
            q = np.minimum(top * 2 - 1, np.floor(b * idd + top + 0.5)).astype(np.int64)
            lo, hi = q[:16], q[16:]
            qs = ((lo & 0xF) | ((hi & 0xF) << 4)).astype(np.uint8)
            if ttype == Q4_0:
                blocks.append(f16_bits(d).tobytes() + qs.tobytes())
            else:
                qh = sum(int((lo[j] >> 4) & 1) << j for j in range(16)) | \
                     sum(int((hi[j] >> 4) & 1) << (j + 16) for j in range(16))
                blocks.append(f16_bits(d).tobytes() + struct.pack("<I", qh) + qs.tobytes())
        elif ttype in (Q4_1, Q5_1):
            top = 15 if ttype == Q4_1 else 31
            lo_v, hi_v = b.min(), b.max()
            d = (hi_v - lo_v) / top
            idd = 1 / d if d else 0
            q = np.minimum(top, np.floor((b - lo_v) * idd + 0.5)).astype(np.int64)
            lo, hi = q[:16], q[16:]
            qs = ((lo & 0xF) | ((hi & 0xF) << 4)).astype(np.uint8)
            head = f16_bits(d).tobytes() + f16_bits(lo_v).tobytes()
            if ttype == Q4_1:
                blocks.append(head + qs.tobytes())
            else:
                qh = sum(int((lo[j] >> 4) & 1) << j for j in range(16)) | \
                     sum(int((hi[j] >> 4) & 1) << (j + 16) for j in range(16))
                blocks.append(head + struct.pack("<I", qh) + qs.tobytes())
        else:
            raise ValueError(ttype)
    return b"".join(blocks)


def h16(raw, at):
    return raw[:, at:at + 2].copy().view(np.float16).astype(np.float32)[:, 0]


def dequantize(ttype, raw_bytes):
    """numpy's dequantization of whole blocks: [blocks, values] f32, row-major."""
    n, size = BLOCK[ttype]
    raw = np.frombuffer(raw_bytes, dtype=np.uint8).reshape(-1, size)
    nb = raw.shape[0]
    if ttype == Q8_0:
        return h16(raw, 0)[:, None] * raw[:, 2:].view(np.int8).astype(np.float32)
    if ttype in (Q4_0, Q4_1, Q5_0, Q5_1):
        d = h16(raw, 0)
        m = h16(raw, 2) if ttype in (Q4_1, Q5_1) else None
        qs_at = {Q4_0: 2, Q4_1: 4, Q5_0: 6, Q5_1: 8}[ttype]
        qs = raw[:, qs_at:qs_at + 16].astype(np.int64)
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1)
        if ttype in (Q5_0, Q5_1):
            qh = raw[:, qs_at - 4:qs_at].copy().view(np.uint32)[:, 0].astype(np.int64)
            q = q | (((qh[:, None] >> np.arange(32)) & 1) << 4)
        if ttype in (Q4_0, Q5_0):
            return (q - (8 if ttype == Q4_0 else 16)).astype(np.float32) * d[:, None]
        return q.astype(np.float32) * d[:, None] + m[:, None]
    y = np.zeros((nb, 256), dtype=np.float32)
    if ttype == Q2_K:
        sc, qs, d, dmin = raw[:, :16].astype(np.int64), raw[:, 16:80].astype(np.int64), h16(raw, 80), h16(raw, 82)
        for i in range(256):
            n_, r = divmod(i, 128)
            k, l = divmod(r, 32)
            s = sc[:, 8 * n_ + 2 * k + l // 16]
            q = (qs[:, 32 * n_ + l] >> (2 * k)) & 3
            y[:, i] = (d * (s & 0xF)) * q - dmin * (s >> 4)
    elif ttype == Q3_K:
        hm, qs, s12, d = raw[:, :32].astype(np.int64), raw[:, 32:96].astype(np.int64), raw[:, 96:108].astype(np.int64), h16(raw, 108)
        def scale(j):  # 16 six-bit scales: low nibbles in bytes 0..7, high pairs in 8..11
            low = (s12[:, j] & 0xF) if j < 8 else (s12[:, j - 8] >> 4)
            high = (s12[:, 8 + j % 4] >> (2 * (j // 4))) & 3
            return low | (high << 4)
        for i in range(256):
            n_, r = divmod(i, 128)
            k, l = divmod(r, 32)
            q = ((qs[:, 32 * n_ + l] >> (2 * k)) & 3) - np.where(hm[:, l] & (1 << (4 * n_ + k)), 0, 4)
            y[:, i] = (d * (scale(8 * n_ + 2 * k + l // 16) - 32)) * q
    elif ttype in (Q4_K, Q5_K):
        d, dmin, s12 = h16(raw, 0), h16(raw, 2), raw[:, 4:16].astype(np.int64)
        qh = raw[:, 16:48].astype(np.int64) if ttype == Q5_K else None
        qs = raw[:, 48:176].astype(np.int64) if ttype == Q5_K else raw[:, 16:144].astype(np.int64)
        def scale_min(j):
            if j < 4:
                return s12[:, j] & 63, s12[:, j + 4] & 63
            return (s12[:, j + 4] & 0xF) | ((s12[:, j - 4] >> 6) << 4), (s12[:, j + 4] >> 4) | ((s12[:, j] >> 6) << 4)
        for i in range(256):
            j, r = divmod(i, 64)
            hi, l = divmod(r, 32)
            s, m = scale_min(2 * j + hi)
            q = (qs[:, 32 * j + l] >> (4 * hi)) & 0xF
            if ttype == Q5_K:
                q = q + np.where(qh[:, l] & (1 << (2 * j + hi)), 16, 0)
            y[:, i] = (d * s) * q - dmin * m
    elif ttype == Q6_K:
        ql, qh, sc, d = raw[:, :128].astype(np.int64), raw[:, 128:192].astype(np.int64), raw[:, 192:208].view(np.int8).astype(np.int64), h16(raw, 208)
        for i in range(256):
            n_, r = divmod(i, 128)
            k, l = divmod(r, 32)  # k: which of the four 32-value quarters
            low = (ql[:, 64 * n_ + l + 32 * (k % 2)] >> (4 * (k // 2))) & 0xF
            high = (qh[:, 32 * n_ + l] >> (2 * k)) & 3
            y[:, i] = (d * sc[:, 8 * n_ + l // 16 + 2 * k]) * ((low | (high << 4)) - 32)
    return y


def random_blocks(ttype, count, rng):
    """`count` blocks of random bytes whose f16 scales are small finite numbers."""
    n, size = BLOCK[ttype]
    raw = rng.integers(0, 256, size=(count, size), dtype=np.uint8)
    halves = {Q4_0: [0], Q4_1: [0, 2], Q5_0: [0], Q5_1: [0, 2], Q8_0: [0], Q2_K: [80, 82], Q3_K: [108],
              Q4_K: [0, 2], Q5_K: [0, 2], Q6_K: [208]}[ttype]
    for at in halves:
        raw[:, at:at + 2] = f16_bits(rng.uniform(-0.05, 0.05, size=count)).view(np.uint8).reshape(count, 2)
    return raw.tobytes()


# ---- Hugging Face folders as GGUF ----
def permute(w, heads):
    """convert_hf_to_gguf's row order for q and k of the architecture llama."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down", "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
               "mlp.gate": "ffn_gate_inp", "block_sparse_moe.gate": "ffn_gate_inp",
               "mlp.shared_expert_gate": "ffn_gate_inp_shexp", "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
               "mlp.shared_expert.up_proj": "ffn_up_shexp", "mlp.shared_expert.down_proj": "ffn_down_shexp"}
# One matrix per expert in transformers' files, one [experts, rows, columns] tensor per layer in GGUF.
EXPERT = re.compile(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight")
EXPERT_PART = {"gate_proj": "ffn_gate_exps", "w1": "ffn_gate_exps", "up_proj": "ffn_up_exps", "w3": "ffn_up_exps",
               "down_proj": "ffn_down_exps", "w2": "ffn_down_exps"}


# Gemma 2's and 3's four norms a layer (Gemma's and the rest: the two of LAYER_NAMES).
SANDWICH_NAMES = dict(LAYER_NAMES, post_attention_layernorm="post_attention_norm",
                      pre_feedforward_layernorm="ffn_norm", post_feedforward_layernorm="post_ffw_norm")


def gguf_name(hf, arch="llama"):
    names = SANDWICH_NAMES if arch in ("gemma2", "gemma3") else LAYER_NAMES
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".")  # model.layers.N.<module…>.<weight|bias>
    return "blk.%s.%s.%s" % (parts[2], names[".".join(parts[3:-1])], parts[-1])


def raw_of(ttype, w):
    if ttype == F32:
        return w.astype(np.float32).tobytes()
    if ttype == F16:
        return w.astype(np.float16).tobytes()
    if ttype == BF16:
        u = w.astype(np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    return quantize(ttype, w)


def value_of(ttype, raw, shape):
    if ttype == F32:
        return np.frombuffer(raw, np.float32).reshape(shape)
    if ttype == F16:
        return np.frombuffer(raw, np.float16).astype(np.float32).reshape(shape)
    if ttype == BF16:
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return dequantize(ttype, raw).reshape(shape)


def model_kvs(folder, arch):
    c = json.load(open(os.path.join(folder, "config.json")))
    p = arch + "."
    kvs = [("general.architecture", STRING, arch), ("general.name", STRING, os.path.basename(folder)),
           (p + "context_length", U32, c["max_position_embeddings"]), (p + "embedding_length", U32, c["hidden_size"]),
           (p + "block_count", U32, c["num_hidden_layers"]), (p + "feed_forward_length", U32, c["intermediate_size"]),
           (p + "attention.head_count", U32, c["num_attention_heads"]),
           (p + "attention.head_count_kv", U32, c["num_key_value_heads"]),
           (p + "attention.layer_norm_rms_epsilon", F32V, c["rms_norm_eps"]),
           (p + "vocab_size", U32, c["vocab_size"])]
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    rope = c["rope_parameters"].get("full_attention", c["rope_parameters"])  # Gemma 3: its global layers'
    kvs.append((p + "rope.freq_base", F32V, rope["rope_theta"]))
    if rope["rope_type"] == "linear":
        kvs += [(p + "rope.scaling.type", STRING, "linear"), (p + "rope.scaling.factor", F32V, rope["factor"])]
    if arch in ("gemma2", "gemma3"):
        kvs.append((p + "attention.sliding_window", U32, c["sliding_window"]))
    if arch == "gemma2":
        kvs += [(p + "attn_logit_softcapping", F32V, c["attn_logit_softcapping"]),
                (p + "final_logit_softcapping", F32V, c["final_logit_softcapping"])]
    partial = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
    kvs.append((p + "rope.dimension_count", U32, int(head_dim * partial)))
    if arch == "phi3":  # no window: 0, as the converter writes it for Phi-4
        kvs.append((p + "attention.sliding_window", U32, c.get("sliding_window") or 0))
    if rope["rope_type"] == "longrope":  # Phi-3: the factors are tensors (convert_model)
        orig, ctx = rope["original_max_position_embeddings"], c["max_position_embeddings"]
        scale = ctx / orig
        attn = 1.0 if scale <= 1.0 else float(np.sqrt(1 + np.log(scale) / np.log(orig)))
        kvs += [(p + "rope.scaling.original_context_length", U32, orig), (p + "rope.scaling.attn_factor", F32V, attn)]
    if head_dim != c["hidden_size"] // c["num_attention_heads"]:
        kvs += [(p + "attention.key_length", U32, head_dim), (p + "attention.value_length", U32, head_dim)]
    if rope["rope_type"] == "yarn":
        kvs += [(p + "rope.scaling.type", STRING, "yarn"), (p + "rope.scaling.factor", F32V, rope["factor"]),
                (p + "rope.scaling.original_context_length", U32, rope["original_max_position_embeddings"])]
    experts = c.get("num_experts") or c.get("num_local_experts")
    if experts:
        kvs += [(p + "expert_count", U32, experts), (p + "expert_used_count", U32, c["num_experts_per_tok"])]
        if "moe_intermediate_size" in c:
            kvs.append((p + "expert_feed_forward_length", U32, c["moe_intermediate_size"]))
        if c.get("shared_expert_intermediate_size"):
            kvs.append((p + "expert_shared_feed_forward_length", U32, c["shared_expert_intermediate_size"]))
    for key, field in (("bos", "bos_token_id"), ("eos", "eos_token_id")):
        if c.get(field) is not None:
            kvs.append(("tokenizer.ggml.%s_token_id" % key, U32, c[field]))
    return c, head_dim, kvs


def rope_freqs(c, head_dim):
    """convert_hf_to_gguf's divisors for Llama 3.1's rescaling, one per rotated pair."""
    r = c["rope_parameters"]
    freqs = 1.0 / (r["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen = r["original_max_position_embeddings"] / r["low_freq_factor"]
    high_wavelen = r["original_max_position_embeddings"] / r["high_freq_factor"]
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(r["factor"])
        else:
            smooth = (r["original_max_position_embeddings"] / wavelen - r["low_freq_factor"]) / (
                r["high_freq_factor"] - r["low_freq_factor"])
            out.append(1 / ((1 - smooth) / r["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def convert_model(name, arch, types=None, expected=None, tokenizer=None, chat=None, out=None, extra=()):
    folder = os.path.join(ROOT, name)
    c, head_dim, kvs = model_kvs(folder, arch)
    kvs += list(extra)
    weights = read_safetensors(os.path.join(folder, "model.safetensors"))
    tensors, values, stacks = [], {}, {}
    for hf in sorted(weights):
        w = weights[hf]
        m = EXPERT.fullmatch(hf)
        if m:
            stacks.setdefault("blk.%s.%s.weight" % (m.group(1), EXPERT_PART[m.group(3)]), {})[int(m.group(2))] = w
            continue
        if hf.endswith("shared_expert_gate.weight"):  # llama.cpp's [hidden]
            w = w.reshape(-1)
        if arch.startswith("gemma") and hf.endswith("norm.weight"):  # ggml's gain: 1 + w
            w = w + np.float32(1)
        if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
            w = permute(w, c["num_attention_heads"] if ".q_proj." in hf else c["num_key_value_heads"])
        name_in_file = gguf_name(hf, arch)
        ttype = (types or {}).get(name_in_file.split(".", 2)[-1] if hf.startswith("model.layers") else name_in_file, F32)
        if w.ndim == 1:
            ttype = F32
        raw = raw_of(ttype, w)
        tensors.append((name_in_file, ttype, list(w.shape), raw))
        v = value_of(ttype, raw, w.shape)
        if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):  # back to transformers' rows
            heads = c["num_attention_heads"] if ".q_proj." in hf else c["num_key_value_heads"]
            v = v.reshape(heads, v.shape[0] // heads // 2, 2, *v.shape[1:]).swapaxes(1, 2).reshape(v.shape)
        values[hf] = v
    for stacked in sorted(stacks):
        w = np.stack([stacks[stacked][e] for e in sorted(stacks[stacked])])
        ttype = (types or {}).get(stacked.split(".", 2)[-1], F32)
        raw = raw_of(ttype, w)
        tensors.append((stacked, ttype, list(w.shape), raw))
        layer, part = stacked.split(".")[1], stacked.split(".")[2]
        v = value_of(ttype, raw, w.shape)
        for e in range(w.shape[0]):
            leaf = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}[part]
            values["model.layers.%s.mlp.experts.%d.%s.weight" % (layer, e, leaf)] = v[e]
    if c["rope_parameters"].get("rope_type") == "longrope":
        for kind in ("long", "short"):
            f = np.array(c["rope_parameters"][kind + "_factor"], dtype=np.float32)
            tensors.append(("rope_factors_%s.weight" % kind, F32, [len(f)], f.tobytes()))
    if c["rope_parameters"].get("rope_type") == "llama3":
        f = rope_freqs(c, head_dim)
        tensors.append(("rope_freqs.weight", F32, [len(f)], f.tobytes()))
    if tokenizer:
        kvs += tokenizer_kvs(*tokenizer)
    if chat:
        kvs.append(("tokenizer.chat_template", STRING, open(chat).read()))
    write_gguf(os.path.join(OUT, (out or name) + ("_quant" if types else "") + ".gguf"), kvs, tensors)
    if expected:
        write_safetensors(os.path.join(OUT, expected), values)


GPT2_NAMES = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
              "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}


def convert_gpt2(name):
    """GPT-2 as the converter writes it: Conv1D weights ([in, out]) transposed to ggml's [out, in]."""
    folder = os.path.join(ROOT, name)
    c = json.load(open(os.path.join(folder, "config.json")))
    kvs = [("general.architecture", STRING, "gpt2"), ("gpt2.context_length", U32, c["n_positions"]),
           ("gpt2.embedding_length", U32, c["n_embd"]), ("gpt2.block_count", U32, c["n_layer"]),
           ("gpt2.feed_forward_length", U32, c.get("n_inner") or 4 * c["n_embd"]),
           ("gpt2.attention.head_count", U32, c["n_head"]),
           ("gpt2.attention.layer_norm_epsilon", F32V, c["layer_norm_epsilon"]),
           ("tokenizer.ggml.bos_token_id", U32, c["bos_token_id"]), ("tokenizer.ggml.eos_token_id", U32, c["eos_token_id"])]
    tensors = []
    for hf, w in sorted(read_safetensors(os.path.join(folder, "model.safetensors")).items()):
        if hf.endswith((".attn.bias", ".attn.masked_bias")) or hf == "lm_head.weight":
            continue
        if hf == "transformer.wte.weight":  # the converter's copy for the head, quantized apart from it
            tensors.append(("output.weight", Q8_0, list(w.shape), raw_of(Q8_0, w)))
        top = {"transformer.wte.weight": "token_embd.weight", "transformer.wpe.weight": "position_embd.weight",
               "transformer.ln_f.weight": "output_norm.weight", "transformer.ln_f.bias": "output_norm.bias"}
        if hf in top:
            gname = top[hf]
        else:
            parts = hf.split(".")  # transformer.h.N.<module…>.<weight|bias>
            gname = "blk.%s.%s.%s" % (parts[2], GPT2_NAMES[".".join(parts[3:-1])], parts[-1])
            if w.ndim == 2:
                w = w.T.copy()
        tensors.append((gname, F32, list(w.shape), w.astype(np.float32).tobytes()))
    write_gguf(os.path.join(OUT, name + ".gguf"), kvs, tensors)


# ---- tokenizers ----
def tokenizer_kvs(path, pre=None):
    t = json.load(open(path))
    model = t["model"]
    ids = dict(model["vocab"])
    special = {}
    for a in t["added_tokens"]:
        ids[a["content"]] = a["id"]
        special[a["id"]] = a["special"]
    n = max(ids.values()) + 1
    tokens = ["[PAD%d]" % i for i in range(n)]
    types = [5] * n  # ids nothing names: unused [PADi] tokens, as the converter writes them
    for tok, i in ids.items():
        tokens[i] = tok
        types[i] = 1
    for i, sp in special.items():
        types[i] = 3 if sp else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    spm = model.get("byte_fallback", False)
    kvs = [("tokenizer.ggml.model", STRING, "llama" if spm else "gpt2")]
    if spm:
        scores = [0.0] * n
        made = {}
        for rank, m in enumerate(merges):
            made.setdefault(m.replace(" ", ""), rank)
        for tok, i in ids.items():
            scores[i] = -float(made[tok]) if tok in made else -1e9
            if len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
                types[i] = 6
            if tok == model.get("unk_token"):
                types[i] = 2
        kvs += [("tokenizer.ggml.scores", ARRAY, (F32V, scores)),
                ("tokenizer.ggml.add_bos_token", BOOL, True), ("tokenizer.ggml.add_eos_token", BOOL, False)]
        kvs.append(("tokenizer.ggml.unknown_token_id", U32, ids[model["unk_token"]]))
        kvs.append(("tokenizer.ggml.bos_token_id", U32, ids["<s>"]))
        kvs.append(("tokenizer.ggml.eos_token_id", U32, ids["</s>"]))
    else:
        if pre:  # no key: llama.cpp's default pre-tokenizer
            kvs.append(("tokenizer.ggml.pre", STRING, pre))
        kvs.append(("tokenizer.ggml.merges", ARRAY, (STRING, merges)))
        post = t.get("post_processor") or {}
        bos = [p["SpecialToken"]["id"] for p in post.get("single", []) if "SpecialToken" in p]
        if bos:
            kvs.append(("tokenizer.ggml.bos_token_id", U32, ids[bos[0]]))
        kvs.append(("tokenizer.ggml.add_bos_token", BOOL, bool(bos)))
    kvs += [("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)), ("tokenizer.ggml.token_type", ARRAY, (I32, types))]
    return kvs


def main():
    os.makedirs(OUT, exist_ok=True)
    convert_model("tiny_llama", "llama", tokenizer=(os.path.join(ROOT, "tiny_llama", "tokenizer.json"), "gpt-2"),
                  chat=os.path.join(ROOT, "tiny_llama", "chat_template.jinja"))
    convert_model("tiny_llama3", "llama")
    convert_model("tiny_qwen2", "qwen2", extra=[("tokenizer.ggml.eot_token_id", U32, 3)])  # an end of turn
    convert_model("tiny_qwen3", "qwen3")
    convert_model("tiny_mixtral", "llama")
    convert_model("tiny_gemma", "gemma")
    convert_model("gguf/src_gemma2", "gemma2", out="tiny_gemma2")
    convert_model("gguf/src_gemma3", "gemma3", out="tiny_gemma3")
    convert_gpt2("tiny_gpt2")
    convert_model("tiny_phi3", "phi3")
    convert_model("tiny_phi3_longrope", "phi3")
    convert_model("tiny_qwen2_moe", "qwen2moe")
    convert_model("tiny_qwen3_moe", "qwen3moe")
    quant = {"attn_q.weight": Q8_0, "attn_k.weight": Q4_0, "attn_v.weight": Q4_1, "attn_output.weight": Q5_0,
             "ffn_gate.weight": Q5_1, "ffn_up.weight": Q8_0, "ffn_down.weight": F16, "token_embd.weight": BF16,
             "output.weight": Q8_0}
    convert_model("tiny_llama", "llama", types=quant, expected="tiny_llama_quant_expected.safetensors")
    quant_moe = {"ffn_gate_exps.weight": Q8_0, "ffn_up_exps.weight": Q4_1, "ffn_down_exps.weight": F16,
                 "attn_q.weight": Q5_0}
    convert_model("tiny_qwen2_moe", "qwen2moe", types=quant_moe, expected="tiny_qwen2_moe_quant_expected.safetensors")
    rng = np.random.default_rng(7)
    tensors, values = [], {}
    for ttype, name in ((Q4_0, "q4_0"), (Q4_1, "q4_1"), (Q5_0, "q5_0"), (Q5_1, "q5_1"), (Q8_0, "q8_0"),
                        (Q2_K, "q2_k"), (Q3_K, "q3_k"), (Q4_K, "q4_k"), (Q5_K, "q5_k"), (Q6_K, "q6_k")):
        n = BLOCK[ttype][0]
        raw = random_blocks(ttype, 1024 // n, rng)
        tensors.append((name, ttype, [2, 512], raw))
        values[name] = dequantize(ttype, raw).reshape(2, 512)
    write_gguf(os.path.join(OUT, "blocks.gguf"), [("general.architecture", STRING, "none")], tensors)
    write_safetensors(os.path.join(OUT, "blocks_expected.safetensors"), values)
    for name, pre, out in (("gpt2", "gpt-2", "gpt2"), ("llama3", "llama-bpe", "llama3"), ("qwen2", "qwen2", "qwen2"),
                           ("llama2", None, "llama2"), ("gpt2", None, "gpt2_no_pre")):
        kvs = [("general.architecture", STRING, "none")]
        kvs += tokenizer_kvs(os.path.join(ROOT, "tokenizer", name, "tokenizer.json"), pre)
        write_gguf(os.path.join(OUT, "tok_%s.gguf" % out), kvs, [])


if __name__ == "__main__":
    main()
