"""tests/data/moe_aux_golden.txt: transformers' load-balancing loss of the mixture-of-experts
fixtures (tests/data/tiny_mixtral, tiny_qwen2_moe, tiny_qwen3_moe), for
tests/io/pretrained_family_test.cc's MoeAuxLoss test.

    python3 tests/nn/gen_hf_moe_aux_golden.py [data dir]

Each folder is loaded with transformers in float32 and run on its logits.safetensors "ids" with
output_router_logits=True: once without labels (the auxiliary loss alone, `aux_loss`) and once
with labels = ids (transformers shifts them: the cross-entropy of each next token, plus
router_aux_loss_coef times the auxiliary loss). One line per folder:
    <folder> <aux_loss> <router_aux_loss_coef> <loss with labels>"""
import os
import sys

import torch
import transformers as tf
from safetensors.torch import load_file

DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
lines = []
for folder in ("tiny_mixtral", "tiny_qwen2_moe", "tiny_qwen3_moe"):
    path = os.path.join(DATA, folder)
    model = tf.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    ids = load_file(os.path.join(path, "logits.safetensors"))["ids"].long()
    with torch.no_grad():
        aux = model(input_ids=ids, output_router_logits=True, use_cache=False).aux_loss
        full = model(input_ids=ids, labels=ids, output_router_logits=True, use_cache=False).loss
    coef = model.config.router_aux_loss_coef
    lines.append(f"{folder} {aux.item():.9g} {coef:.9g} {full.item():.9g}")
with open(os.path.join(DATA, "moe_aux_golden.txt"), "w") as f:
    f.write("# folder aux_loss router_aux_loss_coef loss_with_labels (gen_hf_moe_aux_golden.py, transformers "
            + tf.__version__ + ")\n" + "\n".join(lines) + "\n")
print("\n".join(lines))
