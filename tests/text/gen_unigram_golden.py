#!/usr/bin/env python3
"""Golden ids for the Unigram tokenizers of tests/text/tokenizer_test.cc, as XLM-RoBERTa's
tokenizer.json is made: a SentencePiece Unigram model trained with SentencePiece itself (its
default nmt_nfkc normalization rules, compiled into the model's precompiled_charsmap), converted
to tokenizer.json by transformers (XLMRobertaTokenizer), ids from Hugging Face `tokenizers`:

  xlmr:        XLM-RoBERTa's layout: <s> <pad> </s> <unk> first, the pieces after them, <mask>, the
               Precompiled normalizer and what transformers adds to it, the Metaspace
               pre-tokenizer and decoder, <s> $A </s>; a character outside the vocabulary is
               <unk> (character_coverage below 1 leaves some out);
  xlmr_bytes:  the same model trained with byte_fallback (<0x00>…<0xFF> pieces).

Writes tests/data/tokenizer/<name>/tokenizer.json and golden.txt in gen_tokenizer_golden.py's
format. Needs sentencepiece, transformers and tokenizers.
Usage: python3 tests/text/gen_unigram_golden.py [--corpus FILE] [output folder]
"""
import argparse
import json
import os
import sys
import tempfile

import sentencepiece as spm
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(__file__))
from gen_tokenizer_golden import BERT_TEXTS, QWEN2_TEXTS, TEST_TEXTS, corpus, write_golden  # noqa: E402

# Lines in other scripts, so that the pieces cover them, and texts the normalizer changes:
# fullwidth and compatibility forms, ligatures, circled and super/subscript digits, CRLF and
# other controls, runs of spaces, combining marks in clusters under and over 6 bytes, Hangul
# jamo, emoji sequences.
MULTILINGUAL = [
    "Der schnelle braune Fuchs springt über den faulen Hund, sagte die Großmutter.",
    "Le cœur a ses raisons que la raison ne connaît point; où est la bibliothèque ?",
    "El rápido zorro marrón salta sobre el perro perezoso, ¿verdad? ¡Sí!",
    "Tiếng Việt có dấu: người, được, những, trường, nước.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "快速的棕色狐狸跳过了懒狗。我爱北京天安门。",
    "素早い茶色の狐がのろまな犬を飛び越えた。カタカナとひらがな。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘었다. 한국어 문장입니다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
]
NORMALIZE_TEXTS = [
    "ＦＵＬＬ　ｗｉｄｔｈ　１２３，ｈｅｌｌｏ！ ﾊﾝｶｸ ｶﾞ",
    "ﬁne ﬂow ﬀ ① ⑽ ² ₃ ㎏ ㍿ Ⅻ ½ ™ № …",
    "line one\r\nline two\rthree\u2028four\u0085five\x00six\x07seven",
    "many     spaces\t\ttabs  \n\n  and   trailing   ",
    "   leading spaces",
    "e\u0301 a\u0308 n\u0303 o\u0302\u0323 Z\u0335\u0327 x\u20dd i\u0307\u0301\u0300",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab \ud55c\uad6d \u0915\u094d\u0937 \u0e01\u0e33",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f44d\U0001f3fd \U0001f1fa\U0001f1f8\U0001f1e9 \u2764\ufe0f",
    "\u00adsoft\u200bzero\u200cwidth\u200djoin\ufeffbom \u00a0nbsp \u3000ideo",
    "Ω Å ﬃ ǅ ẛ̣ ｶﾞ ㋿ 𝐁𝐨𝐥𝐝 𝟘𝟙 ℌℑ",
]


def train_spm(texts, byte_fallback, folder):
    model = os.path.join(folder, "spm.model")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=model[:-6], model_type="unigram", vocab_size=800,
        hard_vocab_limit=False, character_coverage=0.995, byte_fallback=byte_fallback,
        normalization_rule_name="nmt_nfkc", minloglevel=2)  # <unk> <s> </s> first, as XLM-R's model
    return model


def convert(model, folder, byte_fallback):
    """transformers' converter of slow SentencePiece tokenizers (convert_slow_tokenizer), which made
    the tokenizer.json files of XLM-RoBERTa's checkpoints: the model's pieces and scores, its
    precompiled_charsmap as a Precompiled normalizer."""
    from transformers.convert_slow_tokenizer import XLMRobertaConverter

    class Slow:  # what the converter reads of a slow tokenizer: XLM-RoBERTa's first four ids
        vocab_file = model

        @staticmethod
        def convert_tokens_to_ids(token):
            return {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}[token]

    class Converter(XLMRobertaConverter):
        handle_byte_fallback = byte_fallback  # the model's byte_fallback into the Unigram model

    tok = Converter(Slow()).converted()
    path = os.path.join(folder, "tokenizer.json")
    tok.save(path)
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "data", "tokenizer"))
    parser.add_argument("--corpus", default=None)
    args = parser.parse_args()
    texts = corpus(args.corpus)[:4000] + MULTILINGUAL * 20
    for name, byte_fallback in (("xlmr", False), ("xlmr_bytes", True)):
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            path = convert(train_spm(texts, byte_fallback, tmp), tmp, byte_fallback)
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
        for key in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
            text = json.dumps(spec.get(key))
            print(name, key, text[:300] + ("…" if len(text) > 300 else ""))
        model = spec["model"]
        print(name, "model", model["type"], "unk_id", model.get("unk_id"), "byte_fallback",
              model.get("byte_fallback"), "pieces", len(model["vocab"]))
        with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False, indent=1)
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        write_golden(tok, folder, TEST_TEXTS + QWEN2_TEXTS + BERT_TEXTS + MULTILINGUAL[:4] + NORMALIZE_TEXTS)


if __name__ == "__main__":
    main()
