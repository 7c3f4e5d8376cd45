"""tests/data/gguf/src_gemma2, src_gemma3: tiny Gemma 2 and Gemma 3 folders (transformers'
save_pretrained) with the settings llama.cpp derives for a GGUF file rather than reads from it,
and transformers' logits for them, for tests/io/gguf_test.cc (the GGUF files themselves are
written from these folders by gen_gguf_fixtures.py):
  - the attention scale: a GGUF file has no query_pre_attn_scalar; llama.cpp takes head_dim below
    27B parameters (hidden / heads at 27B), so query_pre_attn_scalar = head_dim here;
  - Gemma 3's windows: llama.cpp slides in 5 of every 6 layers (layer_types follow), with a local
    RoPE base of 10000; the global layers' base and linear rescaling (factor 8, as Gemma 3 4B
    and up) are read from the file.
Sizes as tests/nn/gen_hf_family_golden.py's tiny_gemma2 and tiny_gemma3 (Gemma 3 with 6 layers, so
one is global); 1-d parameters moved off their initial values; float32 on the CPU, Gemma 2 with
eager attention (sdpa leaves its scores' soft cap out).

    PYTHONPATH=tests/nn python3 tests/io/gen_gguf_gemma_golden.py [out dir]
"""
import os
import sys

import torch
import transformers as tf

from golden_file import write_safetensors

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "gguf")
IDS = torch.tensor([[1, 5, 9, 13, 17, 21, 25], [60, 2, 33, 7, 7, 48, 0]])
COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-5, initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0, head_dim=16,
              max_position_embeddings=16, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16,
              sliding_window=3, tie_word_embeddings=True)
MODELS = {
    "src_gemma2": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(
        **COMMON, num_hidden_layers=2, attn_logit_softcapping=5.0, final_logit_softcapping=3.0)),
    "src_gemma3": lambda: tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(
        **COMMON, num_hidden_layers=6, layer_types=["sliding_attention"] * 5 + ["full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
}
for name, make in MODELS.items():
    torch.manual_seed(0)
    model = make().float().eval()
    if name == "src_gemma2":
        model.set_attn_implementation("eager")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        logits = model(input_ids=IDS, use_cache=False).logits.float()
    out = os.path.join(OUT, name)
    model.save_pretrained(out, safe_serialization=True)
    write_safetensors(os.path.join(out, "logits.safetensors"), {"ids": IDS.to(torch.int32), "logits": logits},
                      {"transformers": tf.__version__})
    print("wrote", out, tuple(logits.shape))
