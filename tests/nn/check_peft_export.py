"""Runs the adapter folders tg::pretrained::save_adapter wrote through peft: each must load with
PeftModel.from_pretrained over its base (tests/data/<base_model_name_or_path>) and give the logits
the library computed for the adapted model.

    TG_EXPORT_DIR=/tmp/peft build/tests/pretrained_adapter_test   # writes the folders
    python3 tests/nn/check_peft_export.py /tmp/peft [tests/data]

Each folder holds tg_check.safetensors: "ids" I32 [B, T] and "logits" F32 [B, T, vocab], the
library's logits of the model that wrote the adapter (cpu backend). peft runs it in float32 with
eager attention; the relative difference (max |a - b| over max |b|) must be below 1e-4. Exits 1
if any folder fails."""
import json
import os
import sys

import peft
import torch
import transformers as tf
from safetensors.torch import load_file

root = sys.argv[1]
data = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "data")
failed = checked = 0
for name in sorted(os.listdir(root)):
    folder = os.path.join(root, name)
    check = os.path.join(folder, "tg_check.safetensors")
    if not os.path.exists(check):
        continue
    want = load_file(check)
    with open(os.path.join(folder, "adapter_config.json")) as f:
        config = json.load(f)
    base = os.path.join(data, config["base_model_name_or_path"])
    model = tf.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    model = peft.PeftModel.from_pretrained(model, folder).eval()
    with torch.no_grad():
        got = model(input_ids=want["ids"].long(), use_cache=False).logits.float()
    diff = ((got - want["logits"]).abs().max() / want["logits"].abs().max()).item()
    ok = diff < 1e-4
    failed += not ok
    checked += 1
    print(f"{name}: PeftModel over {config['base_model_name_or_path']} (peft {peft.__version__}, r {config['r']}, "
          f"rank_pattern {config['rank_pattern']}, alpha_pattern {config['alpha_pattern']}), relative logit "
          f"difference {diff:.2e} {'ok' if ok else 'FAILED'}")
if checked == 0:
    print("no folder with tg_check.safetensors under", root)
sys.exit(1 if failed or checked == 0 else 0)
