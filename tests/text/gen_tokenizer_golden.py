#!/usr/bin/env python3
"""Golden ids for tests/text/tokenizer_test.cc from Hugging Face `tokenizers`.

Trains small BPE tokenizers (a vocabulary of 1000) on a text corpus:
  gpt2:   byte-level, GPT-2's pre-tokenizer (ByteLevel with its regex);
  llama3: byte-level, Llama 3's (a Split on Llama 3's regex, then ByteLevel without a regex, BPE's
          ignore_merges and a <|begin_of_text|> template);
  llama2: SentencePiece-style as Llama 2's file: a Prepend("▁") + Replace(" ", "▁") normalizer,
          no pre-tokenizer, byte_fallback to <0x00>…<0xFF>, fuse_unk, a <s> template and the
          Replace/ByteFallback/Fuse/Strip decoder;
  metaspace: SentencePiece-style with the Metaspace pre-tokenizer (prepend_scheme "first",
          split) and decoder instead of the normalizer;
  qwen2:  byte-level as Qwen2's and Qwen3's files: an NFC normalizer, a Split on Qwen2's regex
          (Llama 3's, digits one at a time), ByteLevel without a regex, <|endoftext|>,
          <|im_start|> and <|im_end|>; its cases add texts that NFC changes (QWEN2_TEXTS);
  o200k:  byte-level as gpt-oss's (o200k_harmony) file: a Split on tiktoken's o200k regex (words
          cut where lower case turns upper, contractions after words), ByteLevel without a
          regex, BPE's ignore_merges; its cases add O200K_TEXTS;
  tekken: the same with Mistral's tekken regex (o200k's without contractions, digits one at a
          time), as Mistral Nemo's and Small 3's files;
  bert:   WordPiece as bert-base-uncased's file: the BertNormalizer (clean text, spaces around
          CJK, lowercase, accents stripped), the BertPreTokenizer, "##" pieces, [CLS] $A [SEP]
          as a TemplateProcessing and the WordPiece decoder; its cases add BERT_TEXTS;
  bert_cased: the same cased (no lowercase, accents kept), its template as a BertProcessing;
saves each as tests/data/tokenizer/<name>/tokenizer.json and writes the ids `tokenizers` gives
for fixed test texts to tests/data/tokenizer/<name>/golden.txt, one case a line:

  <add_special 0|1> TAB <the text's UTF-8 bytes in hex> TAB <ids, space-separated>
  TAB <the UTF-8 bytes of `tokenizers`' decode of those ids (special tokens kept), in hex>

(Files written before the fourth field existed have three; the test then expects the decode to
give back the text.)

Corpus: the Debian fortunes (/usr/share/games/fortunes, `fortunes` package) when present, else
a passage embedded here, or the file given with --corpus (one text a line). Needs Python 3 and
`pip install tokenizers`.
Usage: python3 tests/text/gen_tokenizer_golden.py [--only NAME,NAME] [--corpus FILE]
       [output folder, default tests/data/tokenizer]
"""
import argparse
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

O200K_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                 r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                 r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                 r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                 r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                  r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
                  r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

FALLBACK_CORPUS = """\
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age
of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season
of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair.
We'll see: they're here, I'm sure you've heard, he'd say 1984 or 2024 or 3.14159.
Der schnelle braune Fuchs springt über den faulen Hund. Le cœur a ses raisons.
Быстрая коричневая лиса прыгает через ленивую собаку. 快速的棕色狐狸跳过了懒狗。
"""

TEST_TEXTS = [
    "Hello world",
    " Hello  world   ",
    "We'll see: they're here, I'M sure you'VE heard, he'd say 1984 or 123456789.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Le cœur a ses raisons.",
    "Быстрая коричневая лиса, 快速的棕色狐狸跳过了懒狗, ελληνικά, हिन्दी, العربية",
    "emoji 🙂👍🏽 and 👨‍👩‍👧 family, ½ ² Ⅻ ٣",
    "tabs\tand\nnew\r\nlines\n\n\n  indented\n",
    "code: if (x != 0) { return a[i] + b_j; }  // done!!!",
    "1 12 123 1234 12345 3.14159 -42",
    "a<|endoftext|>b <|begin_of_text|> c<|end_of_text|>",
    "'s 'S 't 're 've 'm 'll 'd 'x '",
    "<s>a</s> <unk> \u2581lead \u2581\u2581 trail\u2581",
    "",
]

# Texts NFC changes: decomposed accents, marks out of canonical order, Hangul jamo, a singleton,
# a composition exclusion; and chat markers.
QWEN2_TEXTS = [
    "Cafe\u0301 cre\u0300me bru\u0302le\u0301e, n\u0303, A\u030a \u212b",
    "q\u0307\u0323 a\u0323\u0302 \u1100\u1161\u11a8\u1100\u1161 \u0958",
    "<|im_start|>user\nWie geht's? Grüße aus Köln<|im_end|>\n<|im_start|>assistant\n",
]

# Where o200k's regex cuts words: case changes (camel case, acronyms before a word, titlecase
# and modifier letters), combining marks before, inside and after letters, contractions in any
# case after a word, slashes and newlines after punctuation, scripts without case.
O200K_TEXTS = [
    "HelloWorld camelCaseWords ABCdef McDonald's iPhone HTTPServer XMLHttpRequest getHTTPResponseCode",
    "DON'T Don'T it's IT'S we'RE You'LL they'd I'm O'Neil 'tis",
    "e\u0301te\u0301 \u0301A \u0301a CAFE\u0301 A\u0301b \u01c4\u01c5\u01c6 \u01c5ab \u02b0\u02b2x x\u02b0Y",
    "path/to/file/\nnext //comment\r\n\r\n ok?/ a-/\n\n!!/x",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0391\u0392\u0393\u03b1\u03b2\u03b3",
    "12345678 x1y22z333 \u0663\u0664\u0665 A1b2C3",
    "\t\u0301 \u0301\u0301 .\u0301x \u0301\n",
]

# What BERT's normalizer and WordPiece do: controls dropped, CJK split, accents, case, a word of
# more than 100 characters, pieces missing from the vocabulary, special tokens in the text.
BERT_TEXTS = [
    "Hello, WORLD! Don't stop-believing... (ok?)",
    "Ca\u0301fe\u0301 CAF\u00c9 \u00c5ngstr\u00f6m na\u00efve \u0130stanbul \u1e9e Stra\u00dfe \u03a3\u039f\u03a6\u0399\u0391",
    "ctrl\u0000chars\u0007here\ufffd\u200bzero\u00adsoft\u2028sep\u00a0nbsp\u3000wide",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8 mixed\u4e2dtext \u3042\u3044 \ud55c\uad6d\uc5b4",
    "x" * 101 + " " + "y" * 100,
    "the [MASK] sat on the [MASK]. [CLS] [SEP] [PAD] [UNK] [mask]",
    "zqxjkv qqqq \u2603\u2604 \U0001f600 \u00bd \u2116 \u00a7\u00b6 \u2014\u2013 \u00ab\u00bb \u201chi\u201d",
]


def train_wordpiece(texts, cased):
    """A WordPiece tokenizer as BERT's tokenizer.json files are: [PAD] [UNK] [CLS] [SEP] [MASK]
    first, the BertNormalizer and BertPreTokenizer, [CLS] $A [SEP] after encoding."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=not cased)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=1000, special_tokens=specials, limit_alphabet=200,
                                        show_progress=False)
    tok.train_from_iterator(texts, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if cased:
        tok.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
    else:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok


def corpus(path=None):
    if path:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    folder = "/usr/share/games/fortunes"
    if os.path.isdir(folder):
        texts = []
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if "." in name or not os.path.isfile(path):
                continue  # the .dat indexes and .u8 links
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.extend(t.strip() for t in f.read().split("\n%\n") if t.strip())
        if texts:
            return texts
    return FALLBACK_CORPUS.splitlines()


def train(texts, specials, llama3, qwen2=False, pattern=None):
    tok = Tokenizer(models.BPE(ignore_merges=True) if llama3 else models.BPE())
    if llama3 or qwen2:
        pattern = pattern or (QWEN2_PATTERN if qwen2 else LLAMA3_PATTERN)
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if qwen2:
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    if llama3 and pattern in (None, LLAMA3_PATTERN):
        bos = specials[0]
        tok.post_processor = processors.TemplateProcessing(
            single=bos + " $A", pair=bos + " $A " + bos + " $B", special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def train_sentencepiece(texts, metaspace):
    """A SentencePiece-style BPE as Llama 2's tokenizer.json: words split at "▁" while training,
    then <unk>, <s>, </s> and the 256 byte tokens first in the vocabulary, and the file's
    normalizer, pre-tokenizer and decoder as converted Llama 2 (or Metaspace) files have them."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    # A small alphabet, so that rare characters fall back to their bytes.
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=120,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    spec = json.loads(tok.to_str())
    trained = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for token, _ in trained:
        if token not in vocab:
            vocab[token] = len(vocab)
    spec["model"]["vocab"] = vocab
    spec["model"]["byte_fallback"] = True
    spec["model"]["fuse_unk"] = True
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    template = {"single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    spec["post_processor"] = dict(type="TemplateProcessing", **template)
    if metaspace:
        spec["normalizer"] = None
        spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                 "split": True}
        spec["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}
    else:
        spec["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        spec["pre_tokenizer"] = None
        spec["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return Tokenizer.from_str(json.dumps(spec))


def write_golden(tok, folder, texts):
    """folder/golden.txt: each text without and with the special tokens, in the format above."""
    lines = []
    for text in texts:
        for add_special in (False, True):
            ids = tok.encode(text, add_special_tokens=add_special).ids
            decoded = tok.decode(ids, skip_special_tokens=False)
            lines.append("%d\t%s\t%s\t%s" % (add_special, text.encode("utf-8").hex(), " ".join(map(str, ids)),
                                              decoded.encode("utf-8").hex()))
    with open(os.path.join(folder, "golden.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%s: vocabulary of %d, %d cases" % (folder, tok.get_vocab_size(), len(lines)))


def write_splits(pattern, folder, texts):
    """folder/splits.txt: the pieces `tokenizers`' Split on `pattern` cuts each text into, one text
    a line: <the text's UTF-8 in hex> TAB <each piece's UTF-8 in hex, comma-separated>."""
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
    lines = []
    for text in texts:
        pieces = [p for p, _ in split.pre_tokenize_str(text)]
        assert "".join(pieces) == text
        lines.append("%s\t%s" % (text.encode("utf-8").hex(), ",".join(p.encode("utf-8").hex() for p in pieces)))
    with open(os.path.join(folder, "splits.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%s: %d texts split" % (folder, len(lines)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "data", "tokenizer"))
    parser.add_argument("--only", default="gpt2,llama3,llama2,metaspace")
    parser.add_argument("--corpus", default=None)
    args = parser.parse_args()
    texts = corpus(args.corpus)
    configs = {
        "gpt2": lambda: train(texts, ["<|endoftext|>"], False),
        "llama3": lambda: train(texts, ["<|begin_of_text|>", "<|end_of_text|>"], True),
        "llama2": lambda: train_sentencepiece(texts, metaspace=False),
        "metaspace": lambda: train_sentencepiece(texts, metaspace=True),
        "qwen2": lambda: train(texts, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], False, qwen2=True),
        "o200k": lambda: train(texts, ["<|startoftext|>", "<|endoftext|>", "<|return|>"], True,
                               pattern=O200K_PATTERN),
        "tekken": lambda: train(texts, ["<unk>", "<s>", "</s>"], True, pattern=TEKKEN_PATTERN),
        "bert": lambda: train_wordpiece(texts, cased=False),
        "bert_cased": lambda: train_wordpiece(texts, cased=True),
    }
    for name in args.only.split(","):
        tok = configs[name]()
        out = args.out
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"))
        extra = (QWEN2_TEXTS if name == "qwen2" else BERT_TEXTS if name.startswith("bert")
                 else O200K_TEXTS if name in ("o200k", "tekken") else [])
        write_golden(tok, folder, TEST_TEXTS + extra)
        if name in ("o200k", "tekken"):
            write_splits(O200K_PATTERN if name == "o200k" else TEKKEN_PATTERN, folder,
                         TEST_TEXTS + extra + texts[:400])


if __name__ == "__main__":
    main()
