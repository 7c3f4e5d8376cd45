"""tests/data/peft_<name>: PEFT LoRA adapters (save_pretrained folders: adapter_config.json and
adapter_model.safetensors) over the tiny transformers models of tests/data, and the logits the
adapted model gives, for tests/io/pretrained_adapter_test.cc.

    PYTHONPATH=tests/nn python3 tests/nn/gen_hf_peft_golden.py [data dir]

Each adapter is made by peft's own get_peft_model with init_lora_weights=False (A and B both
drawn, so the adapter changes the logits), over the base folder as transformers loads it.
logits.safetensors holds the inputs the base fixture's golden file holds ("ids", and BERT's
"mask" and "types") and "logits" F32: what the PeftModel (eval mode, float32, CPU, no cache)
gives for them. The adapters exercise what a loader must get right: GPT-2's Conv1D
(fan_in_fan_out), Phi-3's and GPT-NeoX's fused projections, rsLoRA's scaling, per-module ranks
and alphas (rank_pattern, alpha_pattern), a classifier trained in full (modules_to_save), and
Mamba's projections."""
import json
import os
import sys

import peft
import torch
import transformers as tf
from safetensors.torch import load_file

from golden_file import write_safetensors

DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")

ADAPTERS = {
    # Every projection of a Llama block; dropout kept in the config (off in eval).
    "peft_llama": ("tiny_llama", tf.AutoModelForCausalLM, dict(
        r=4, lora_alpha=8, lora_dropout=0.05, task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])),
    # GPT-2's Conv1D keeps its weight as [in, out]; lora_A/B are Linear-shaped all the same.
    "peft_gpt2": ("tiny_gpt2", tf.AutoModelForCausalLM, dict(
        r=4, lora_alpha=16, fan_in_fan_out=True, task_type="CAUSAL_LM",
        target_modules=["c_attn", "c_proj", "c_fc"])),
    # Phi-3's fused qkv_proj and gate_up_proj, with rsLoRA's alpha/sqrt(r).
    "peft_phi3": ("tiny_phi3", tf.AutoModelForCausalLM, dict(
        r=4, lora_alpha=4, use_rslora=True, task_type="CAUSAL_LM",
        target_modules=["qkv_proj", "gate_up_proj", "o_proj"])),
    # GPT-NeoX's query_key_value fused per head; a rank and an alpha per module.
    "peft_neox": ("tiny_gpt_neox", tf.AutoModelForCausalLM, dict(
        r=2, lora_alpha=8, task_type="CAUSAL_LM", target_modules=["query_key_value", "dense_4h_to_h"],
        rank_pattern={"dense_4h_to_h": 3}, alpha_pattern={"query_key_value": 5})),
    # A classifier fine-tuned with LoRA: its head trained in full (modules_to_save).
    "peft_bert_cls": ("tiny_bert_cls", tf.AutoModelForSequenceClassification, dict(
        r=4, lora_alpha=8, task_type="SEQ_CLS", target_modules=["query", "value"],
        modules_to_save=["classifier"])),
    # Mamba's input and state projections (peft refuses its out_proj), only in the second layer.
    "peft_mamba": ("tiny_mamba", tf.AutoModelForCausalLM, dict(
        r=4, lora_alpha=8, task_type="CAUSAL_LM", target_modules=["in_proj", "x_proj"],
        layers_to_transform=[1])),
}

for name, (base_name, auto, config) in ADAPTERS.items():
    torch.manual_seed(0)
    base_dir = os.path.join(DATA, base_name)
    model = auto.from_pretrained(base_dir, dtype=torch.float32).eval()
    golden = load_file(os.path.join(base_dir, "logits.safetensors"))
    inputs = {"input_ids": golden["ids"].long()}
    if "mask" in golden:
        inputs.update(attention_mask=golden["mask"].long(), token_type_ids=golden["types"].long())
    lora = peft.LoraConfig(init_lora_weights=False, **config)
    model = peft.get_peft_model(model, lora).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():  # the head trained in full: moved off the base's values
            if "modules_to_save" in n:
                p.add_(0.2 * torch.randn_like(p))
        kwargs = {} if "mask" in golden else {"use_cache": False}
        logits = model(**inputs, **kwargs).logits.float()
    out = os.path.join(DATA, name)
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "adapter_config.json")) as f:
        saved = json.load(f)
    saved["base_model_name_or_path"] = base_name  # the fixture's sibling, not this machine's path
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump(saved, f, indent=2, sort_keys=True)
        f.write("\n")
    keep = {k: v.int() for k, v in golden.items() if k in ("ids", "mask", "types")}
    write_safetensors(os.path.join(out, "logits.safetensors"), {**keep, "logits": logits}, {})
    base_logits = golden["logits"]
    change = ((logits - base_logits).norm() / base_logits.norm()).item()
    keys = sorted(load_file(os.path.join(out, "adapter_model.safetensors")).keys())
    print("wrote", out, tuple(logits.shape), f"relative change from the base {change:.3f}")
    print("  keys:", keys[:4], "...", len(keys))
    print("  config:", {k: saved[k] for k in sorted(saved) if saved[k] not in (None, False, [], {})})
for readme in [os.path.join(DATA, n, "README.md") for n in ADAPTERS]:
    if os.path.exists(readme):  # peft's model card: not a fixture
        os.remove(readme)
