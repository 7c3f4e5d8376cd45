"""tests/data/tiny_t5*, tests/data/tokenizer/t5: tiny random T5 models made with transformers' own
classes, a T5 tokenizer, and what they compute, for tests/io/pretrained_t5_test.cc and
tests/text/tokenizer_test.cc.

    PYTHONPATH=tests/nn:tests/text python3 tests/nn/gen_hf_t5_golden.py [out dir]

The tokenizer: a SentencePiece Unigram model trained on gen_tokenizer_golden.py's corpus (its
nmt_nfkc rules; <pad> 0, </s> 1, <unk> 2 as T5's), converted by transformers' T5Converter with
10 extra ids (<extra_id_9>…<extra_id_0> after the pieces) into tokenizer/t5/tokenizer.json, and
golden.txt holds the ids `tokenizers` gives for the test texts (gen_tokenizer_golden.py's format);
tokenizer/t5_legacy is the same with the older files' pre-tokenizer (WhitespaceSplit, then
Metaspace with add_prefix_space).

  tiny_t5            T5ForConditionalGeneration as the original T5: ReLU feed-forward, the head
                     tied to the shared embedding (the decoder's output scaled by d_model^-½),
                     dropout_rate 0.1 (off in eval)
  tiny_flan_t5       as Flan-T5 / T5 v1.1: gated-GELU feed-forward (tanh GELU), an untied
                     lm_head, dropout 0
  tiny_t5_encoder    T5EncoderModel with tiny_flan_t5's encoder

All: width 32, 4 heads of 8, feed-forward 48, 2 encoder and 2 decoder blocks, 8 relative
position buckets up to distance 20 (so the logarithmic buckets and the cap are both reached);
lm_head scaled by 8 so that greedy decoding picks varied tokens.
logits.safetensors holds "ids" I32 [2, S] and "mask" I32 [2, S] (two texts padded to one
length), "decoder_ids" I32 [2, T] (the labels shifted right after the start token 0) and
"labels" I32 [2, T] (-100 on padding), and in float32 on the CPU: "encoder_hidden" [2, S, 32],
"logits" [2, T, vocab], transformers' "loss", for tiny_flan_t5 its gradient for every parameter
as "grad/<in-memory name>" (shared's split between encoder.embed_tokens and decoder.embed_tokens,
which transformers 5 keeps apart in an untied model; the file's three copies are equal), and "generated" I32 [2, 9]: greedy generate()'s ids (the start token
and 8 new ones)."""
import json
import os
import sys
import tempfile

import sentencepiece as spm
import torch
import transformers as tf
from tokenizers import Tokenizer

from golden_file import write_safetensors
import gen_tokenizer_golden as gtg
from gen_unigram_golden import MULTILINGUAL

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
SOURCES = ["translate English to German: The house is wonderful.",
           "summarize: studies have shown that owning a dog is good for you"]
TARGETS = ["Das Haus ist wunderbar.", "dogs are good"]
T5_TEXTS = ["translate English to German: That is good.  Two   spaces<extra_id_0> and </s> x",
            "ＦＵＬＬ width ﬁne ½ Ünïcödé e\u0301 <extra_id_9><extra_id_1>", "   leading and trailing   "]


def t5_tokenizer(folder):
    """A SentencePiece model converted as the T5 checkpoints' tokenizer.json files were made
    (transformers' T5Converter: the Precompiled normalizer of the model's nmt_nfkc rules, the
    WhitespaceSplit and Metaspace pre-tokenizer, $A </s>, the extra ids last)."""
    from transformers.convert_slow_tokenizer import T5Converter
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "spm")
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(gtg.corpus()[:4000] + MULTILINGUAL * 20), model_prefix=prefix, model_type="unigram",
            vocab_size=700, hard_vocab_limit=False, character_coverage=0.995, pad_id=0, eos_id=1, unk_id=2,
            bos_id=-1, normalization_rule_name="nmt_nfkc", minloglevel=2)

        class Slow:  # what the converter reads of a slow T5Tokenizer
            vocab_file = prefix + ".model"
            _extra_ids = 10
            legacy = True
            add_prefix_space = True

            @staticmethod
            def convert_tokens_to_ids(token):
                return {"<pad>": 0, "</s>": 1, "<unk>": 2}[token]

        tok = T5Converter(Slow()).converted()
    for i in range(10):
        tok.add_special_tokens(["<extra_id_%d>" % i])
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    # The layout of the T5 checkpoints' older files (t5-small, flan-t5-*): words split at whitespace
    # first, then Metaspace with add_prefix_space.
    spec = json.loads(tok.to_str())
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}]}
    spec["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}
    legacy = os.path.join(os.path.dirname(folder), "t5_legacy")
    os.makedirs(legacy, exist_ok=True)
    with open(os.path.join(legacy, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, indent=1)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "pad_token": "<pad>",
                   "unk_token": "<unk>", "extra_ids": 10}, f, indent=2)
    print("tokenizer: vocabulary", tok.get_vocab_size())
    return tok


def copy_tokenizer(folder):
    import shutil
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(OUT, "tokenizer", "t5", name), os.path.join(folder, name))


def perturb(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))


def save(name, model, tensors):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    copy_tokenizer(folder)
    write_safetensors(os.path.join(folder, "logits.safetensors"), tensors, {})
    from safetensors import safe_open
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        print(name, sorted(f.keys())[:12], len(list(f.keys())))
    print(open(os.path.join(folder, "config.json")).read())


def main():
    tok_folder = os.path.join(OUT, "tokenizer", "t5")
    t5_tokenizer(tok_folder)
    raw = Tokenizer.from_file(os.path.join(tok_folder, "tokenizer.json"))
    spec = json.loads(raw.to_str())
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        print(key, json.dumps(spec.get(key))[:600])
    print("model", json.dumps({k: v for k, v in spec["model"].items() if k != "vocab"}))
    print("added", [(a["id"], a["content"]) for a in spec["added_tokens"]][:14])
    gtg.write_golden(raw, tok_folder, gtg.TEST_TEXTS + T5_TEXTS)
    legacy = os.path.join(OUT, "tokenizer", "t5_legacy")
    gtg.write_golden(Tokenizer.from_file(os.path.join(legacy, "tokenizer.json")), legacy, gtg.TEST_TEXTS + T5_TEXTS)
    hf = tf.T5TokenizerFast(tokenizer_file=os.path.join(tok_folder, "tokenizer.json"))
    for text in T5_TEXTS + SOURCES:
        a, b = hf(text).input_ids, raw.encode(text).ids
        print("same" if a == b else "DIFFER", a, b, repr(hf.decode(a)))

    enc = hf(SOURCES, padding=True, return_tensors="pt")
    labels = hf(TARGETS, padding=True, return_tensors="pt").input_ids
    labels[labels == 0] = -100
    common = dict(vocab_size=raw.get_vocab_size(), d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2,
                  num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                  initializer_factor=1.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    print("ids", enc.input_ids.tolist(), "labels", labels.tolist())
    for name, extra in (("tiny_t5", dict(feed_forward_proj="relu", tie_word_embeddings=True, dropout_rate=0.1)),
                        ("tiny_flan_t5", dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                                              dropout_rate=0.0))):
        config = tf.T5Config(**common, **extra)
        config.tie_word_embeddings = extra["tie_word_embeddings"]  # transformers 5 keeps the default else
        config._attn_implementation = "eager"
        torch.manual_seed(0)
        model = tf.T5ForConditionalGeneration(config)
        perturb(model)
        with torch.no_grad():  # logits that differ from step to step, so greedy decoding is a test
            model.lm_head.weight.mul_(8.0)
            # Untied, transformers 5 keeps encoder.embed_tokens and decoder.embed_tokens apart from
            # shared; the checkpoints' files hold three equal copies (transformers 4 tied them).
            for stack in (model.encoder, model.decoder):
                if stack.embed_tokens.weight.data_ptr() != model.shared.weight.data_ptr():
                    stack.embed_tokens.weight.copy_(model.shared.weight)
        model.eval()
        model.zero_grad()
        out = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=labels)
        out.loss.backward()
        decoder_ids = model._shift_right(labels)
        t = {"ids": enc.input_ids.int(), "mask": enc.attention_mask.int(), "decoder_ids": decoder_ids.int(),
             "labels": labels.int(), "encoder_hidden": out.encoder_last_hidden_state.detach().float(),
             "logits": out.logits.detach().float(), "loss": out.loss.detach().reshape(1).float()}
        if name == "tiny_flan_t5":
            for n, p in model.named_parameters():
                if p.grad is None:
                    print("no gradient:", n)
                    continue
                t["grad/" + n] = p.grad.float().clone()
            print("in-memory names", [n for n, _ in model.named_parameters()][:8])
        with torch.no_grad():
            gen = model.generate(input_ids=enc.input_ids, attention_mask=enc.attention_mask, max_new_tokens=8,
                                 min_new_tokens=8, do_sample=False, num_beams=1)
        print(name, "generated", gen.tolist())
        t["generated"] = gen.int()
        save(name, model, t)
        if name == "tiny_flan_t5":
            encoder = tf.T5EncoderModel(config)
            encoder.load_state_dict(model.state_dict(), strict=False)
            encoder.eval()
            with torch.no_grad():
                h = encoder(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state
            print("encoder model equals the full model's encoder:", torch.equal(h, out.encoder_last_hidden_state))
            save("tiny_t5_encoder", encoder, {"ids": enc.input_ids.int(), "mask": enc.attention_mask.int(),
                                              "encoder_hidden": h.float()})


if __name__ == "__main__":
    main()
