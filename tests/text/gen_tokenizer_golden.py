#!/usr/bin/env python3
"""Golden ids for tests/text/tokenizer_test.cc from Hugging Face `tokenizers`.

Trains two small byte-level BPE tokenizers (a vocabulary of 1000) on a text corpus, one with
GPT-2's pre-tokenizer (ByteLevel with its regex) and one with Llama 3's (a Split on Llama 3's
regex, then ByteLevel without a regex, BPE's ignore_merges and a <|begin_of_text|> template),
saves each as tests/data/tokenizer/<name>/tokenizer.json and writes the ids `tokenizers` gives
for fixed test texts to tests/data/tokenizer/<name>/golden.txt, one case a line:

  <add_special 0|1> TAB <the text's UTF-8 bytes in hex> TAB <ids, space-separated>

Corpus: the Debian fortunes (/usr/share/games/fortunes, `fortunes` package) when present, else
a passage embedded here. Needs Python 3 and `pip install tokenizers`.
Usage: python3 tests/text/gen_tokenizer_golden.py [output folder, default tests/data/tokenizer]
"""
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

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
    "",
]


def corpus():
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


def train(name, specials, llama3):
    tok = Tokenizer(models.BPE(ignore_merges=True) if llama3 else models.BPE())
    if llama3:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    if llama3:
        bos = specials[0]
        tok.post_processor = processors.TemplateProcessing(
            single=bos + " $A", pair=bos + " $A " + bos + " $B", special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "tokenizer")
    configs = [("gpt2", ["<|endoftext|>"], False), ("llama3", ["<|begin_of_text|>", "<|end_of_text|>"], True)]
    for name, specials, llama3 in configs:
        tok = train(name, specials, llama3)
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"))
        lines = []
        for text in TEST_TEXTS:
            for add_special in (False, True):
                ids = tok.encode(text, add_special_tokens=add_special).ids
                lines.append("%d\t%s\t%s" % (add_special, text.encode("utf-8").hex(), " ".join(map(str, ids))))
        with open(os.path.join(folder, "golden.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("%s: vocabulary of %d, %d cases" % (folder, tok.get_vocab_size(), len(lines)))


if __name__ == "__main__":
    main()
