"""tests/data/tiny_mamba2, tiny_mamba2_tied, tiny_mamba_untied, tiny_granite_hybrid(_rope, _moe)
and tiny_bamba: tiny random transformers Mamba-2, Mamba and hybrid models (save_pretrained) with
the options a checkpoint may set, their logits
for IDS, the loss transformers computes with IDS as labels and every parameter's gradient of it
(by the file's names), and their greedy continuation of PROMPT (transformers' cached decoding), for
tests/io/pretrained_mamba2_test.cc. PYTHONPATH=tests/nn python3 this.py [out dir [names]]

tiny_mamba2: 4 heads of 16 channels, B and C in 2 groups, an untied head, chunk_size 4 (so the
7-token forward crosses transformers' chunks); tiny_mamba2_tied: one group, a tied head, in/out
projection biases, no conv bias and dt clamped to time_step_limit (0, 0.05); tiny_mamba_untied:
Mamba-1 with the biases and the untied head the library used to refuse. The Granite 4.0 hybrids
(GraniteMoeHybridForCausalLM): tiny_granite_hybrid, Mamba-2 and attention layers without
positional encoding ("nope"), Granite's multipliers, grouped-query attention and a tied head;
tiny_granite_hybrid_rope with RoPE, B and C in 2 groups, projection biases, no conv bias and an
untied head; tiny_granite_hybrid_moe with 4 experts (top 2) beside the shared MLP. tiny_bamba:
BambaForCausalLM, the same blocks under Bamba's names, with partial RoPE in its attention layer.
tiny_nemotron_h: NemotronHForCausalLM, one mixer a layer (Mamba-2 with its norm per group of
channels and Δ ≥ time_step_min, attention without RoPE, a squared-ReLU MLP), 48 channels in the
Mamba-2 blocks where expand · hidden is 64. Arguments after the out dir: the names to write (default: all)."""
import os, sys
import torch
from transformers import (BambaConfig, BambaForCausalLM, GraniteMoeHybridConfig,
                          GraniteMoeHybridForCausalLM, Mamba2Config, Mamba2ForCausalLM, MambaConfig,
                          MambaForCausalLM, NemotronHConfig, NemotronHForCausalLM)
from golden_file import write_safetensors

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
IDS = torch.tensor([[1, 5, 9, 13, 17, 21, 25], [60, 2, 33, 7, 7, 48, 0]])
PROMPT = torch.tensor([[3, 17, 42]])
MODELS = {
    "tiny_mamba2": lambda: Mamba2ForCausalLM(Mamba2Config(
        vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4, expand=2,
        num_heads=4, head_dim=16, n_groups=2, chunk_size=4, layer_norm_epsilon=1e-5,
        use_bias=False, use_conv_bias=True, tie_word_embeddings=False, initializer_range=0.1)),
    "tiny_mamba2_tied": lambda: Mamba2ForCausalLM(Mamba2Config(
        vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=3, expand=2,
        num_heads=8, head_dim=8, n_groups=1, chunk_size=256, layer_norm_epsilon=1e-6,
        use_bias=True, use_conv_bias=False, time_step_limit=(0.0, 0.05), tie_word_embeddings=True,
        initializer_range=0.1)),
    "tiny_mamba_untied": lambda: MambaForCausalLM(MambaConfig(
        vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4, expand=2,
        layer_norm_epsilon=1e-5, use_bias=True, use_conv_bias=False, tie_word_embeddings=False,
        initializer_range=0.1)),
    "tiny_granite_hybrid": lambda: GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, shared_intermediate_size=48,
        num_hidden_layers=3, layer_types=["mamba", "attention", "mamba"], num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5, num_local_experts=0,
        position_embedding_type="nope", embedding_multiplier=2.0, residual_multiplier=0.5,
        attention_multiplier=0.2, logits_scaling=3.0, tie_word_embeddings=True,
        mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4,
        mamba_expand=2, mamba_chunk_size=4, initializer_range=0.1)),
    "tiny_granite_hybrid_rope": lambda: GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, shared_intermediate_size=40,
        num_hidden_layers=3, layer_types=["attention", "mamba", "mamba"], num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=32, rms_norm_eps=1e-6, num_local_experts=0,
        position_embedding_type="rope", rope_theta=500.0, embedding_multiplier=1.5,
        residual_multiplier=0.7, attention_multiplier=0.25, logits_scaling=2.0,
        tie_word_embeddings=False, mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=2,
        mamba_d_state=8, mamba_d_conv=3, mamba_expand=2, mamba_conv_bias=False,
        mamba_proj_bias=True, initializer_range=0.1)),
    "tiny_granite_hybrid_moe": lambda: GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(
        vocab_size=64, hidden_size=32, intermediate_size=24, shared_intermediate_size=32,
        num_hidden_layers=2, layer_types=["mamba", "attention"], num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5, num_local_experts=4,
        num_experts_per_tok=2, position_embedding_type="nope", embedding_multiplier=2.0,
        residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=3.0,
        tie_word_embeddings=True, mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1,
        mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, initializer_range=0.1)),
    "tiny_bamba": lambda: BambaForCausalLM(BambaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
        attn_layer_indices=[1], num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=32, rms_norm_eps=1e-5, rope_theta=300.0, tie_word_embeddings=False,
        mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=8, mamba_d_conv=4,
        mamba_expand=2, mamba_chunk_size=4, initializer_range=0.1)),
    "tiny_nemotron_h": lambda: NemotronHForCausalLM(NemotronHConfig(
        vocab_size=64, hidden_size=32, intermediate_size=40, num_hidden_layers=5,
        hybrid_override_pattern="M*-M-", num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        mlp_hidden_act="relu2", max_position_embeddings=32, layer_norm_epsilon=1e-5,
        tie_word_embeddings=False, mamba_num_heads=4, mamba_head_dim=12, n_groups=2,
        ssm_state_size=8, conv_kernel=4, expand=2, chunk_size=4, time_step_min=0.02,
        use_bias=False, use_conv_bias=True, initializer_range=0.1)),
}
ONLY = sys.argv[2:]
# transformers 5 holds GraniteMoeHybrid's experts and router under other names than the file's.
RENAMED = {".block_sparse_moe.router.weight": ".block_sparse_moe.router.layer.weight",
           ".block_sparse_moe.experts.gate_up_proj": ".block_sparse_moe.input_linear.weight",
           ".block_sparse_moe.experts.down_proj": ".block_sparse_moe.output_linear.weight"}


# and Nemotron-H's backbone under "model." (its file says "backbone.").
PREFIXED = {"tiny_nemotron_h": ("model.", "backbone.")}


def file_name(n, model):
    for ours, theirs in RENAMED.items():
        if n.endswith(ours):
            return n[: -len(ours)] + theirs
    held, written = PREFIXED.get(model, ("", ""))
    return written + n[len(held):] if held and n.startswith(held) else n


for name, make in MODELS.items():
    if ONLY and name not in ONLY:
        continue
    torch.manual_seed(0)
    model = make().float().eval()
    with torch.no_grad():  # every 1-d parameter moved off its init: a lost or misplaced one shows
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        logits = model(input_ids=IDS, use_cache=False).logits.float()
        greedy = model.generate(PROMPT, max_new_tokens=8, do_sample=False, min_new_tokens=8)
    loss = model(input_ids=IDS, labels=IDS, use_cache=False).loss
    loss.backward()
    grads = {"grad/" + file_name(n, name): p.grad.float() for n, p in model.named_parameters()}
    out = os.path.join(OUT, name)
    model.save_pretrained(out, safe_serialization=True)
    write_safetensors(os.path.join(out, "logits.safetensors"),
                      {"ids": IDS.to(torch.int32), "logits": logits,
                       "prompt": PROMPT.to(torch.int32), "greedy": greedy.to(torch.int32),
                       "loss": loss.detach().reshape(1).float(), **grads}, {})
    print("wrote", out, tuple(logits.shape), greedy.tolist())
