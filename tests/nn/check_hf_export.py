"""Runs the folders tg::pretrained::save wrote through transformers: each must load as the class
its config.json names (LlamaForCausalLM, …, BertForSequenceClassification, RobertaForMaskedLM,
BertForQuestionAnswering) and give the logits the library computed for them (question
answering: start and end logits stacked on the last axis, as Bert::answer_span gives them).

    TG_EXPORT_DIR=/tmp/export build/tests/pretrained_save_test   # writes the folders
    python3 tests/nn/check_hf_export.py /tmp/export

Each folder holds tg_check.safetensors: "ids" I32 [B, T] and "logits" F32, the library's logits
of the reloaded folder on its cpu backend. transformers runs the folder in
float32 (bf16 files widen exactly) with eager attention; the relative difference (max |a - b|
over max |b|) must be below 1e-4. Exits 1 if any folder fails."""
import json
import os
import sys

import torch
import transformers as tf
from safetensors.torch import load_file

root = sys.argv[1]
failed = 0
for name in sorted(os.listdir(root)):
    folder = os.path.join(root, name)
    check = os.path.join(folder, "tg_check.safetensors")
    if not os.path.exists(check):
        continue
    want = load_file(check)
    with open(os.path.join(folder, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    model = getattr(tf, arch).from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    decoder = arch.endswith("ForCausalLM") or arch.endswith("LMHeadModel")
    with torch.no_grad():
        out = model(input_ids=want["ids"].long(), **({"use_cache": False} if decoder else {}))
        got = torch.stack([out.start_logits, out.end_logits], -1) if arch.endswith("QuestionAnswering") else out.logits
        got = got.float()
    diff = ((got - want["logits"]).abs().max() / want["logits"].abs().max()).item()
    ok = diff < 1e-4
    failed += not ok
    print(f"{name}: {type(model).__name__} from {tf.__version__}, relative logit difference "
          f"{diff:.2e} {'ok' if ok else 'FAILED'}")
sys.exit(1 if failed else 0)
