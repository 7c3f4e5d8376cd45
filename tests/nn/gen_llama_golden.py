#!/usr/bin/python3
"""Generates tests/data/tiny_llama/: a tiny Hugging Face LlamaForCausalLM's weights and its
logits for fixed prompts, which tests/nn/llama_test.cc (LogitsEqualTransformers) loads by name
into tensorgrad's nn::Llama and compares, to a relative error below 1e-4.

Regenerate (needs torch and transformers >= 4.41, the first with mlp_bias; later versions save no
rotary inv_freq buffer, so the file holds exactly nn::Llama's parameters):

    python3 tests/nn/gen_llama_golden.py

Writes
    tests/data/tiny_llama/model.safetensors   save_pretrained's weights (float32), HF names
    tests/data/tiny_llama/config.json         save_pretrained's configuration
    tests/data/tiny_llama/logits.safetensors  "ids" I32 [B, T], "logits" F32 [B, T, vocab];
                                              the metadata holds nn::LlamaConfig's sizes
"""
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from golden_file import write_safetensors

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tiny_llama")

ROPE_THETA = 10000.0

config = LlamaConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=16,
    rms_norm_eps=1e-5,
    # transformers 4.x reads rope_theta, 5.x rope_parameters: give both the same base.
    rope_theta=ROPE_THETA,
    rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
    attention_bias=False,
    mlp_bias=False,
    tie_word_embeddings=False,
    hidden_act="silu",
    # Larger than the default 0.02 so the logits are far from zero and the comparison bites.
    initializer_range=0.1,
    torch_dtype="float32",
)

torch.manual_seed(0)
model = LlamaForCausalLM(config).to(torch.float32).eval()
# The norms' gains start at one; move them off it so a missing gain shows.
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            p.add_(0.1 * torch.randn_like(p))

# The rotation the model really uses must be the plain one with base ROPE_THETA.
head = config.hidden_size // config.num_attention_heads
expected = 1.0 / (ROPE_THETA ** (torch.arange(0, head, 2, dtype=torch.float32) / head))
assert torch.allclose(model.model.rotary_emb.inv_freq.float().cpu(), expected), "unexpected RoPE frequencies"

ids = torch.tensor([[1, 5, 9, 13, 17, 21, 25], [60, 2, 33, 7, 7, 48, 0]], dtype=torch.int64)
with torch.no_grad():
    # No attention mask, no cache: every position of both rows, causal.
    logits = model(input_ids=ids, use_cache=False).logits.float()

os.makedirs(OUT, exist_ok=True)
model.save_pretrained(OUT, safe_serialization=True)
write_safetensors(
    os.path.join(OUT, "logits.safetensors"),
    {"ids": ids.to(torch.int32), "logits": logits},
    {
        "vocab": str(config.vocab_size),
        "seq_len": str(config.max_position_embeddings),
        "layers": str(config.num_hidden_layers),
        "d_model": str(config.hidden_size),
        "heads": str(config.num_attention_heads),
        "kv_heads": str(config.num_key_value_heads),
        "mlp_hidden": str(config.intermediate_size),
        "rms_eps": repr(config.rms_norm_eps),
        "rope_theta": repr(ROPE_THETA),
    },
)
print("wrote", OUT, "logits", tuple(logits.shape))
