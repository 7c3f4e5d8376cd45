"""tests/data/tiny_clip*, tests/data/tokenizer/clip: a tiny random CLIP made with transformers'
own classes, its tokenizer, and what they compute, for tests/io/pretrained_clip_test.cc and
tests/text/tokenizer_test.cc.

    PYTHONPATH=tests/nn:tests/text python3 tests/nn/gen_hf_clip_golden.py [out dir]

The tokenizer: merges trained by `tokenizers` on the corpus of gen_tokenizer_golden.py with
CLIP's normalizer and pre-tokenizer, the vocabulary laid out as CLIP's (the 256 byte-level
characters, the same with "</w>", the merges, <|startoftext|>, <|endoftext|>), given to
transformers' CLIPTokenizer as vocab.json and merges.txt; its save_pretrained writes
tokenizer/clip/tokenizer.json, and golden.txt holds the ids `tokenizers` gives for the test texts
(gen_tokenizer_golden.py's format, the decode transformers').

  tiny_clip          CLIPModel: a text tower of width 32 (quick GELU, causal, positions 24) and
                     a vision tower of width 40 on 16 × 16 images in 4 × 4 patches, both
                     projected to 24; its tokenizer and an image processor config
  tiny_clip_text     CLIPTextModelWithProjection with the text tower's and projection's weights
  tiny_clip_vision   CLIPVisionModelWithProjection with the vision tower's and projection's

tiny_clip/logits.safetensors holds "ids" I32 [2, T] and "mask" I32 [2, T] (two captions padded
to one length), "pixels" F32 [2, 3, 16, 16], and in float32 on the CPU: "text_hidden" (the text
tower's last_hidden_state, after its final norm), "text_features" and "image_features" (the
projections, not normalised: transformers 5's get_*_features, whose pooler_output CLIPModel's
output carries), "text_embeds" and "image_embeds" (normalised), "vision_hidden" (before the
post-norm), "logits_per_image" [2, 2], the contrastive "loss" and its gradient for every
parameter as "grad/<in-memory name>" (the files' names), and "legacy_text_features": the text
features with eos_token_id 2 (old configs: the pooled token is the one of the largest id).
tiny_clip_text holds "ids", "mask" and its "text_features", tiny_clip_vision "pixels" and its
"image_features" (the WithProjection classes' text_embeds and image_embeds, not normalised)."""
import json
import os
import sys
import tempfile

import torch
import transformers as tf
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from golden_file import write_safetensors
import gen_tokenizer_golden as gtg

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
CLIP_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
CLIP_TEXTS = [
    "A photo of a CAT.  Two\tdogs\n\nplaying in the snow!!",
    "don't stop: it's 2024, we'll see 3.14 and x's",
    "<|startoftext|>a diagram<|endoftext|> of   things",
    "Ünïcödé Café ÀÉÎ straße ǅ İstanbul",
]


def trained_merges(texts):
    tok = Tokenizer(models.BPE(end_of_word_suffix="</w>", continuing_subword_prefix=""))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP_PATTERN), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=700, end_of_word_suffix="</w>", show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [m.split(" ") if isinstance(m, str) else m for m in merges]


def clip_tokenizer(folder):
    """CLIP's vocabulary layout over trained merges, loaded by transformers, saved to `folder`."""
    merges = trained_merges(gtg.corpus())
    chars = [chr(c) for c in gtg_byte_chars()]
    vocab = chars + [c + "</w>" for c in chars]
    seen = set(vocab)
    kept = []
    for a, b in merges:
        if a + b not in seen and a in seen and b in seen:
            vocab.append(a + b)
            seen.add(a + b)
            kept.append((a, b))
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    with tempfile.TemporaryDirectory() as tmp:
        vf, mf = os.path.join(tmp, "vocab.json"), os.path.join(tmp, "merges.txt")
        with open(vf, "w", encoding="utf-8") as f:
            json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
        with open(mf, "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "".join("%s %s\n" % m for m in kept))
        hf = None
        # transformers 5 takes the vocabulary and merges themselves; 4 took the files.
        for make in (lambda: tf.CLIPTokenizer(vocab={t: i for i, t in enumerate(vocab)}, merges=kept),
                     lambda: tf.CLIPTokenizer(vocab_file=vf, merges_file=mf),
                     lambda: tf.CLIPTokenizer.from_pretrained(tmp)):
            try:
                hf = make()
            except Exception as e:  # noqa: BLE001 - try the next constructor
                print("constructor failed:", e)
                continue
            if len(hf) == len(vocab):
                break
            print("constructor gave a vocabulary of", len(hf), "not", len(vocab))
        assert hf is not None and len(hf) == len(vocab)
        hf.save_pretrained(folder)
    print("tokenizer classes:", type(hf).__name__, sorted(os.listdir(folder)))
    return hf


def gtg_byte_chars():
    """GPT-2's bytes_to_unicode values in its order (CLIP's vocabulary begins with them)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return cs


def write_golden(raw, hf_tok, folder, texts):
    """gen_tokenizer_golden.py's golden.txt, the decode transformers' CLIPTokenizer's: the byte-level
    text with every "</w>" a space, stripped (`tokenizers` alone keeps the "</w>")."""
    lines = []
    for text in texts:
        for add_special in (False, True):
            ids = raw.encode(text, add_special_tokens=add_special).ids
            assert ids == hf_tok(text, add_special_tokens=add_special).input_ids
            decoded = hf_tok.decode(ids, skip_special_tokens=False)
            lines.append("%d\t%s\t%s\t%s" % (add_special, text.encode("utf-8").hex(), " ".join(map(str, ids)),
                                              decoded.encode("utf-8").hex()))
    with open(os.path.join(folder, "golden.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%s: vocabulary of %d, %d cases" % (folder, raw.get_vocab_size(), len(lines)))


def perturb(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() <= 1:
                p.add_(0.1 * torch.randn_like(p))


def save(name, model, tensors, extra=()):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    write_safetensors(os.path.join(folder, "logits.safetensors"), tensors, {})
    for f in extra:
        f(folder)
    from safetensors import safe_open
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        print(name, sorted(f.keys()))
    print(open(os.path.join(folder, "config.json")).read())


def main():
    tok_folder = os.path.join(OUT, "tokenizer", "clip")
    hf_tok = clip_tokenizer(tok_folder)
    raw = Tokenizer.from_file(os.path.join(tok_folder, "tokenizer.json"))
    spec = json.loads(raw.to_str())
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"):
        print(key, json.dumps(spec.get(key)))
    print("model", json.dumps({k: v for k, v in spec["model"].items() if k not in ("vocab", "merges")}))
    write_golden(raw, hf_tok, tok_folder, gtg.TEST_TEXTS + CLIP_TEXTS)
    for text in CLIP_TEXTS:
        a = hf_tok(text).input_ids
        b = raw.encode(text).ids
        print("transformers", a, "tokenizers", b, "decode", repr(hf_tok.decode(a)), repr(raw.decode(b)))

    eos = hf_tok.convert_tokens_to_ids("<|endoftext|>")
    bos = hf_tok.convert_tokens_to_ids("<|startoftext|>")
    text_cfg = dict(vocab_size=len(hf_tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=24, hidden_act="quick_gelu",
                    layer_norm_eps=1e-5, projection_dim=24, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos,
                    initializer_range=0.1)
    vision_cfg = dict(hidden_size=40, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
                      image_size=16, patch_size=4, num_channels=3, hidden_act="quick_gelu", layer_norm_eps=1e-5,
                      projection_dim=24, initializer_range=0.1)
    config = tf.CLIPConfig(text_config=text_cfg, vision_config=vision_cfg, projection_dim=24)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = tf.CLIPModel(config)
    perturb(model)
    model.eval()

    batch = hf_tok(["a photo of a cat", "two dogs playing in the snow"], padding=True, return_tensors="pt")
    ids, mask = batch.input_ids, batch.attention_mask
    print("ids", ids.tolist(), "mask", mask.tolist())
    pixels = torch.randn(2, 3, 16, 16)
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, pixel_values=pixels, return_loss=True)
    out.loss.backward()
    t = {"ids": ids.int(), "mask": mask.int(), "pixels": pixels,
         "text_hidden": out.text_model_output.last_hidden_state.detach().float(),
         "text_features": out.text_model_output.pooler_output.detach().float(),
         "text_embeds": out.text_embeds.detach().float(),
         "vision_hidden": out.vision_model_output.last_hidden_state.detach().float(),
         "image_features": out.vision_model_output.pooler_output.detach().float(),
         "image_embeds": out.image_embeds.detach().float(),
         "logits_per_image": out.logits_per_image.detach().float(),
         "loss": out.loss.detach().reshape(1).float()}
    for name, p in model.named_parameters():
        t["grad/" + name] = p.grad.float().clone()
    print("in-memory names", [n for n, _ in model.named_parameters()][:40])
    with torch.no_grad():
        saved = model.text_model.eos_token_id
        model.text_model.eos_token_id = 2
        legacy = model.get_text_features(input_ids=ids, attention_mask=mask)
        model.text_model.eos_token_id = saved
        legacy = getattr(legacy, "pooler_output", legacy)
    t["legacy_text_features"] = legacy.float()
    processor = tf.CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    save("tiny_clip", model, t, extra=[hf_tok.save_pretrained, processor.save_pretrained])

    with torch.no_grad():
        text = tf.CLIPTextModelWithProjection(config.text_config)
        text.text_model.load_state_dict(model.text_model.state_dict())
        text.text_projection.load_state_dict(model.text_projection.state_dict())
        text.eval()
        o = text(input_ids=ids, attention_mask=mask)
        save("tiny_clip_text", text, {"ids": ids.int(), "mask": mask.int(), "text_features": o.text_embeds.float()},
             extra=[hf_tok.save_pretrained])
        vision = tf.CLIPVisionModelWithProjection(config.vision_config)
        vision.vision_model.load_state_dict(model.vision_model.state_dict())
        vision.visual_projection.load_state_dict(model.visual_projection.state_dict())
        vision.eval()
        o = vision(pixel_values=pixels)
        save("tiny_clip_vision", vision, {"pixels": pixels, "image_features": o.image_embeds.float()},
             extra=[processor.save_pretrained])


if __name__ == "__main__":
    main()
