"""tests/data/tiny_vit, tiny_vit_cls: tiny random Vision Transformers made with transformers' own
classes (save_pretrained folders) and what they compute for a fixed batch of images, for
tests/io/pretrained_vit_test.cc.

    PYTHONPATH=tests/nn python3 tests/nn/gen_hf_vit_golden.py [out dir]

  tiny_vit       ViTModel with its pooler (dense + tanh on the [CLS] token), no bias on q, k, v
                 (qkv_bias false), the tanh GELU (hidden_act "gelu_new")
  tiny_vit_cls   ViTForImageClassification, 5 labels (a classifier on the [CLS] token's final
                 hidden state), the erf GELU
  tiny_deit_distilled
                 DeiTForImageClassificationWithTeacher, 4 labels: a distillation token after
                 [CLS] (18 tokens), the mean of its two classifiers' logits

Both see 16 × 16 images of 3 channels in 4 × 4 patches (16 patches and [CLS]: 17 tokens). Each
model's 1-d parameters (norm gains, biases) and the [CLS] token are moved off their initial
values so that a lost one shows. logits.safetensors holds "pixels" F32 [B, 3, 16, 16] and what the
model gives for them in float32 on the CPU: "hidden" F32 [B, 17, 32] (last_hidden_state, after
the final LayerNorm), and "pooled" F32 [B, 32] (tiny_vit) or "logits" F32 [B, 5] (tiny_vit_cls,
which also holds transformers' cross-entropy "loss" for "labels" I32 [B] and its gradient for
every parameter, in eval mode, as "grad/<name>" under transformers 5's in-memory module names:
vit.layers.<i>.attention.q_proj where the file says vit.encoder.layer.<i>.attention.attention.query,
and so on; tests/io/pretrained_vit_test.cc maps them)."""
import os
import sys

import torch
import transformers as tf

from golden_file import write_safetensors

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
COMMON = dict(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=48, initializer_range=0.1, layer_norm_eps=1e-12,
              attn_implementation="eager")


def perturb(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 or "cls_token" in name or "distillation_token" in name:
                p.add_(0.1 * torch.randn_like(p))


def save(name, model, tensors):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    write_safetensors(os.path.join(folder, "logits.safetensors"), tensors, {})
    from safetensors import safe_open
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        print(name, sorted(f.keys()))


def main():
    torch.manual_seed(0)
    pixels = torch.randn(2, 3, 16, 16)

    base = tf.ViTModel(tf.ViTConfig(hidden_act="gelu_new", qkv_bias=False, **COMMON), add_pooling_layer=True)
    perturb(base)
    base.eval()
    with torch.no_grad():
        out = base(pixel_values=pixels)
    save("tiny_vit", base, {"pixels": pixels, "hidden": out.last_hidden_state.float(),
                            "pooled": out.pooler_output.float()})

    cls = tf.ViTForImageClassification(tf.ViTConfig(hidden_act="gelu", num_labels=5, **COMMON))
    perturb(cls)
    cls.eval()
    labels = torch.tensor([3, 0])
    with torch.no_grad():
        hidden = cls.vit(pixel_values=pixels).last_hidden_state.float()
    cls.zero_grad()
    out = cls(pixel_values=pixels, labels=labels)
    out.loss.backward()
    t = {"pixels": pixels, "hidden": hidden, "logits": out.logits.detach().float(), "labels": labels.int(),
         "loss": out.loss.detach().reshape(1).float()}
    for name, p in cls.named_parameters():
        t["grad/" + name] = p.grad.float().clone()
    save("tiny_vit_cls", cls, t)

    # DeiT with its distillation token: [CLS] and [DIST] before the patches, the logits the
    # mean of cls_classifier on [CLS] and distillation_classifier on [DIST].
    deit = tf.DeiTForImageClassificationWithTeacher(tf.DeiTConfig(hidden_act="gelu", num_labels=4, **COMMON))
    perturb(deit)
    deit.eval()
    with torch.no_grad():
        out = deit(pixel_values=pixels)
        hidden = deit.deit(pixel_values=pixels).last_hidden_state.float()
    save("tiny_deit_distilled", deit, {"pixels": pixels, "hidden": hidden, "logits": out.logits.float()})


if __name__ == "__main__":
    main()
