"""tests/data/tiny_gpt2, tiny_mamba: tiny random transformers models (save_pretrained) and their
logits for IDS, for tests/io/pretrained_test.cc. PYTHONPATH=tests/nn python3 this.py [out dir]"""
import os, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, MambaConfig, MambaForCausalLM
from golden_file import write_safetensors

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
IDS = torch.tensor([[1, 5, 9, 13, 17, 21, 25], [60, 2, 33, 7, 7, 48, 0]])
MODELS = {
    "tiny_gpt2": lambda: GPT2LMHeadModel(GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4, layer_norm_epsilon=1e-5,
        activation_function="gelu_new", initializer_range=0.1)),
    "tiny_mamba": lambda: MambaForCausalLM(MambaConfig(
        vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4, expand=2,
        layer_norm_epsilon=1e-5, use_bias=False, use_conv_bias=True, tie_word_embeddings=True)),
}
for name, make in MODELS.items():
    torch.manual_seed(0)
    model = make().float().eval()
    with torch.no_grad():  # 1-d params moved off their init: a lost one shows
        for n, p in model.named_parameters():
            if p.dim() == 1 and not n.endswith(".D"):
                p.add_(0.1 * torch.randn_like(p))
        logits = model(input_ids=IDS, use_cache=False).logits.float()
    out = os.path.join(OUT, name)
    model.save_pretrained(out, safe_serialization=True)
    write_safetensors(os.path.join(out, "logits.safetensors"),
                      {"ids": IDS.to(torch.int32), "logits": logits}, {})
    print("wrote", out, tuple(logits.shape))
