"""tests/data/tiny_<family>: tiny random transformers models of the Llama family's relatives
(save_pretrained folders) and their logits for fixed ids, for tests/io/pretrained_family_test.cc.

    PYTHONPATH=tests/nn python3 tests/nn/gen_hf_family_golden.py [out dir] [--only name,...]

Each model is built with transformers' own classes, its 1-d parameters (norm gains, biases)
moved off their initial values so a lost one shows, then run in float32 on the CPU without a
cache or mask. logits.safetensors holds "ids" I32 [B, T], "logits" F32 [B, T, vocab] and
"inv_freq" F32 [head_dim / 2], the RoPE frequencies the model's rotary embedding really uses
(after any rope scaling), and "greedy" I32 [1, 11], transformers' greedy `generate` of 8
tokens after the first row's first 3 ids; its metadata holds that embedding's attention_scaling (YaRN's factor
on cos and sin)."""
import os
import sys

import torch
import transformers as tf

from golden_file import write_safetensors

args = [a for a in sys.argv[1:] if not a.startswith("--only")]
only = next((a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--only=")), None)
OUT = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "data")
IDS = torch.tensor([[1, 5, 9, 13, 17, 21, 25], [60, 2, 33, 7, 7, 48, 0]])

# Sizes every model shares: 64 tokens, width 32, 2 layers, 4 query heads over 2 KV heads.
COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
              initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0)


# GPT-NeoX's own names for the shared sizes (multi-head attention: no KV-head count).
NEOX = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, layer_norm_eps=1e-5, max_position_embeddings=16,
            initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def partial(config, fraction, base=None):
    """The fraction of each head RoPE rotates (and its base), wherever this transformers version
    keeps them (rope_parameters in 5; partial_rotary_factor, rope_theta or GPT-NeoX's rotary_pct
    and rotary_emb_base in 4)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict):
        params["partial_rotary_factor"] = fraction
        if base is not None:
            params["rope_theta"] = base
    for key in ("partial_rotary_factor", "rotary_pct"):
        if hasattr(config, key):
            setattr(config, key, fraction)
    for key in ("rope_theta", "rotary_emb_base"):
        if base is not None and hasattr(config, key):
            setattr(config, key, base)
    return config


def rope(kind, **extra):
    return {"rope_type": kind, "rope_theta": 10000.0, **extra}


def gpt_oss_config():
    return tf.GptOssConfig(
        **dict(COMMON, intermediate_size=32), head_dim=8, max_position_embeddings=32,
        num_local_experts=4, num_experts_per_tok=2, sliding_window=3,
        layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False,
        rope_parameters=rope("yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                             original_max_position_embeddings=8))


# MXFP4 as gpt-oss's checkpoints hold the experts: per expert, the [2I, d] rows of gate_up_proj
# (and the [d, I] rows of down_proj) in blocks of 32 values along a row, each an e2m1 code (two
# a byte, the even value in the low nibble) and one power-of-two scale (a byte, exponent + 127).
FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def mxfp4(w):
    """w [E, in, out] → (blocks u8 [E, out, in/32, 16], scales u8 [E, out, in/32])."""
    rows = w.transpose(1, 2).contiguous()  # [E, out, in]
    E, out, n = rows.shape
    g = rows.reshape(E, out, n // 32, 32)
    amax = g.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    exp = torch.ceil(torch.log2(amax / 6.0))
    scaled = g / torch.exp2(exp)
    code = (scaled.abs().unsqueeze(-1) - FP4).abs().argmin(-1) + 8 * (scaled < 0)
    packed = (code[..., 0::2] | (code[..., 1::2] << 4)).to(torch.uint8)
    return packed, (exp.squeeze(-1) + 127).to(torch.uint8)


def quantize_experts(model):
    """The experts' matrices → MXFP4 codes; the model takes their values as transformers'
    own loader decodes them (convert_moe_packed_tensors). Returns the codes by file name."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    packed = {}
    for n, p in model.named_parameters():
        if n.endswith("experts.gate_up_proj") or n.endswith("experts.down_proj"):
            blocks, scales = mxfp4(p.data.float())
            p.data.copy_(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))
            packed[n + "_blocks"], packed[n + "_scales"] = blocks, scales
    return packed


def save_mxfp4(out, packed):
    """model.safetensors with the experts' codes in place of their matrices, and config.json's
    quantization_config as the published checkpoints carry it."""
    import json
    from safetensors.torch import load_file, save_file
    path = os.path.join(out, "model.safetensors")
    tensors = load_file(path)
    for name in packed:
        tensors.pop(name[:-len("_blocks")], None)
    tensors.update(packed)
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


MODELS = {
    # Llama 3.1's frequency rescaling with an 8-token original context, so that at head_dim 8
    # one frequency is smoothed and three are divided by the factor; q/k/v/o biases, tied head.
    "tiny_llama3": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
        **COMMON, max_position_embeddings=16, attention_bias=True, tie_word_embeddings=True,
        rope_parameters=rope("llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=8))),
    # Qwen2: biases on q/k/v only; the window is off (use_sliding_window false).
    "tiny_qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(
        **COMMON, max_position_embeddings=16, tie_word_embeddings=False, use_sliding_window=False,
        sliding_window=4, rope_parameters=rope("default"))),
    # Qwen3: RMSNorm over each head's q and k, a head_dim that is not hidden/heads, YaRN with
    # a factor (4) other than the context's ratio to the original one (64 / 8).
    "tiny_qwen3": lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(
        **COMMON, head_dim=16, max_position_embeddings=64, tie_word_embeddings=True,
        use_sliding_window=False,
        rope_parameters=rope("yarn", factor=4.0, original_max_position_embeddings=8))),
    # Mistral: a 16-token sliding window inside a 32-token context; linear position scaling.
    "tiny_mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(
        **COMMON, max_position_embeddings=32, sliding_window=16, tie_word_embeddings=False,
        rope_parameters=rope("linear", factor=2.0))),
    # Sliding windows of 3 positions, so that the 7-token prompts and greedy decoding use them:
    # Mistral's in every layer, Qwen2's from layer max_window_layers = 1 on.
    "tiny_mistral_window": lambda: tf.MistralForCausalLM(tf.MistralConfig(
        **COMMON, max_position_embeddings=32, sliding_window=3, tie_word_embeddings=False,
        rope_parameters=rope("default"))),
    "tiny_qwen2_window": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(
        **COMMON, max_position_embeddings=16, tie_word_embeddings=False, use_sliding_window=True,
        sliding_window=3, max_window_layers=1, rope_parameters=rope("default"))),
    # Phi-3: fused qkv_proj and gate_up_proj.
    "tiny_phi3": lambda: tf.Phi3ForCausalLM(tf.Phi3Config(
        **COMMON, max_position_embeddings=16, original_max_position_embeddings=16,
        sliding_window=None, tie_word_embeddings=False, rope_parameters=rope("default"))),
    # Phi-3.5 / Phi-4-mini style: LongRoPE (short factors up to the original 8-token context)
    # on half of each head (partial_rotary_factor 0.5).
    "tiny_phi3_longrope": lambda: tf.Phi3ForCausalLM(tf.Phi3Config(
        **COMMON, max_position_embeddings=32, original_max_position_embeddings=8,
        sliding_window=None, tie_word_embeddings=False, partial_rotary_factor=0.5,
        rope_parameters=rope("longrope", short_factor=[1.0, 1.5], long_factor=[2.0, 3.0],
                             original_max_position_embeddings=8, partial_rotary_factor=0.5))),
    # Gemma: (1 + w) norms, the embedding scaled by sqrt(hidden), a tanh-GELU gate, head_dim 16.
    "tiny_gemma": lambda: tf.GemmaForCausalLM(tf.GemmaConfig(
        **COMMON, head_dim=16, max_position_embeddings=16, hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True, rope_parameters=rope("default"))),
    # Gemma 2: four norms a layer, attention logits soft-capped and the final ones too,
    # query_pre_attn_scalar for the scale, sliding windows (3) in every other layer. Run with
    # eager attention (EAGER below): transformers' sdpa attention leaves the scores' soft cap out.
    "tiny_gemma2": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(
        **COMMON, head_dim=16, max_position_embeddings=16, hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=12, attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
        sliding_window=3, tie_word_embeddings=True, rope_parameters=rope("default"))),
    # Gemma 3 (text): q/k norms, windows (3) in 5 of every 6 layers with their own RoPE base.
    "tiny_gemma3": lambda: tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(
        **dict(COMMON, num_hidden_layers=3), head_dim=16, max_position_embeddings=16,
        hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=12, sliding_window=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        tie_word_embeddings=True)),
    # Mixtures of experts. Mixtral: 4 experts of intermediate_size in every layer, top 2
    # renormalised. Qwen2-MoE: 6 experts of 24, top 3 not renormalised, a gated shared expert
    # of 40, layer 1 dense (mlp_only_layers). Qwen3-MoE: 6 experts, top 2 renormalised, experts
    # in every second layer (decoder_sparse_step 2: layer 0 dense), its own head_dim.
    "tiny_mixtral": lambda: tf.MixtralForCausalLM(tf.MixtralConfig(
        **COMMON, max_position_embeddings=16, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=None, tie_word_embeddings=False, rope_parameters=rope("default"))),
    "tiny_qwen2_moe": lambda: tf.Qwen2MoeForCausalLM(tf.Qwen2MoeConfig(
        **COMMON, max_position_embeddings=16, num_experts=6, num_experts_per_tok=3,
        moe_intermediate_size=24, shared_expert_intermediate_size=40, mlp_only_layers=[1],
        norm_topk_prob=False, tie_word_embeddings=False, rope_parameters=rope("default"))),
    "tiny_qwen3_moe": lambda: tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(
        **COMMON, head_dim=16, max_position_embeddings=16, num_experts=6, num_experts_per_tok=2,
        moe_intermediate_size=24, decoder_sparse_step=2, norm_topk_prob=True,
        tie_word_embeddings=False, rope_parameters=rope("default"))),
    # Granite: multipliers on the embeddings (2), the residual branches (0.5), the attention's
    # scale (0.3 for 1/sqrt(8)) and a divisor of the logits (4); MLP biases.
    "tiny_granite": lambda: tf.GraniteForCausalLM(tf.GraniteConfig(
        **COMMON, max_position_embeddings=16, embedding_multiplier=2.0, residual_multiplier=0.5,
        attention_multiplier=0.3, logits_scaling=4.0, mlp_bias=True, tie_word_embeddings=False,
        rope_parameters=rope("default"))),
    # OLMo 2: norms after the attention and the MLP, q/k norms across the heads; attention biases.
    "tiny_olmo2": lambda: tf.Olmo2ForCausalLM(tf.Olmo2Config(
        **COMMON, max_position_embeddings=16, attention_bias=True, tie_word_embeddings=False,
        rope_parameters=rope("default"))),
    # OLMo 3: OLMo 2's with a window of 3 in layer 0 and the RoPE base per layer type.
    "tiny_olmo3": lambda: tf.Olmo3ForCausalLM(tf.Olmo3Config(
        **COMMON, max_position_embeddings=16, sliding_window=3, tie_word_embeddings=False,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": rope("default"),
                         "full_attention": {"rope_type": "default", "rope_theta": 500.0}})),
    # The LayerNorm relatives: GPT-NeoX (Pythia) with its parallel layer and with the sequential
    # one, Phi (one norm shared by both branches, a biased head), StableLM sequential (q/k/v
    # biases) and parallel; each rotates part of a head.
    "tiny_gpt_neox": lambda: tf.GPTNeoXForCausalLM(partial(tf.GPTNeoXConfig(
        **NEOX, use_parallel_residual=True), 0.5)),
    "tiny_gpt_neox_sequential": lambda: tf.GPTNeoXForCausalLM(partial(tf.GPTNeoXConfig(
        **NEOX, use_parallel_residual=False, hidden_act="gelu_new"), 0.25, base=500.0)),
    "tiny_phi": lambda: tf.PhiForCausalLM(partial(tf.PhiConfig(
        **COMMON, max_position_embeddings=16, layer_norm_eps=1e-5), 0.5)),
    "tiny_stablelm": lambda: tf.StableLmForCausalLM(partial(tf.StableLmConfig(
        **COMMON, max_position_embeddings=16, layer_norm_eps=1e-5, use_qkv_bias=True), 0.25)),
    "tiny_stablelm_parallel": lambda: tf.StableLmForCausalLM(partial(tf.StableLmConfig(
        **COMMON, max_position_embeddings=16, layer_norm_eps=1e-5, use_parallel_residual=True), 0.5)),
    # StarCoder 2: LayerNorms, an MLP without a gate (c_fc, c_proj), biases everywhere
    # (use_bias), a sliding window in every layer, a tied head.
    "tiny_starcoder2": lambda: tf.Starcoder2ForCausalLM(tf.Starcoder2Config(
        **NEOX, num_key_value_heads=2, norm_epsilon=1e-5, use_bias=True, sliding_window=3,
        tie_word_embeddings=True)),
    # gpt-oss: attention sinks, q/k/v/o biases, windows (3) in every other layer, YaRN without
    # truncation; 4 experts (biased, their gate and up columns interleaved) of width 32, top 2
    # after a biased router, and the clamped GLU (transformers fixes its limit at 7 whatever
    # swiglu_limit says: the experts' weights are drawn large below so that it clamps).
    # tiny_gpt_oss_mxfp4 holds its experts as the published checkpoints do (MXFP4 below).
    "tiny_gpt_oss": lambda: tf.GptOssForCausalLM(gpt_oss_config()),
    "tiny_gpt_oss_mxfp4": lambda: tf.GptOssForCausalLM(gpt_oss_config()),
}

# Models whose attention transformers only computes in full with its eager implementation.
EAGER = {"tiny_gemma2", "tiny_gpt_oss", "tiny_gpt_oss_mxfp4"}

for name, make in MODELS.items():
    if only and name not in only:
        continue
    torch.manual_seed(0)
    model = make().float().eval()
    if name in EAGER:
        model.set_attn_implementation("eager")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
            elif n.endswith("_bias"):  # gpt-oss's experts' biases [E, width]
                p.add_(0.1 * torch.randn_like(p))
            if n.endswith("mlp.gate.weight") or n.endswith("mlp.router.weight"):
                p.normal_(0.0, 1.0)  # routers (Qwen's start at zero): decisive choices
            if n.endswith("experts.gate_up_proj"):
                p.normal_(0.0, 1.0)  # gpt-oss: gate and up values of ~±6, a fifth beyond 7
        packed = quantize_experts(model) if name.endswith("_mxfp4") else None
        logits = model(input_ids=IDS, use_cache=False).logits.float()
        # Read before generate: past the original context longrope swaps in its long factors.
        # Gemma 3 keeps one table per layer type: the full-attention layers' is compared.
        rotary = model.base_model.rotary_emb
        prefix = "full_attention_" if hasattr(rotary, "full_attention_inv_freq") else ""
        inv_freq = getattr(rotary, prefix + "inv_freq").float().cpu().clone()
        scaling = float(getattr(rotary, prefix + "attention_scaling", 1.0))
        # Greedy continuation of the first row's first 3 ids, 8 new tokens, with the cache.
        greedy = model.generate(IDS[:1, :3], max_new_tokens=8, do_sample=False, min_new_tokens=8,
                                eos_token_id=None, pad_token_id=0)
    out = os.path.join(OUT, name)
    model.save_pretrained(out, safe_serialization=True)
    if packed is not None:
        save_mxfp4(out, packed)
    write_safetensors(os.path.join(out, "logits.safetensors"),
                      {"ids": IDS.to(torch.int32), "logits": logits, "inv_freq": inv_freq,
                       "greedy": greedy.to(torch.int32)},
                      {"attention_scaling": repr(scaling), "transformers": tf.__version__})
    print("wrote", out, tuple(logits.shape), "attention_scaling", scaling)
