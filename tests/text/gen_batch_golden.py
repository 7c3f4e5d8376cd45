#!/usr/bin/env python3
"""Golden batches for tests/text/tokenizer_batch_test.cc from Hugging Face `tokenizers`: the
texts below through encode_batch with truncation to max_length and padding to the longest row,
for the bert (WordPiece) and xlmr (Unigram) tokenizers of tests/data/tokenizer. Writes
<folder>/batch_golden.txt, one row a line:

  <max_length> TAB <pad id> TAB <the text's UTF-8 bytes in hex> TAB <ids> TAB <attention mask>

Usage: python3 tests/text/gen_batch_golden.py [tokenizer folder, default tests/data/tokenizer]
"""
import os
import sys

from tokenizers import Tokenizer

TEXTS = [
    "Hello world",
    "Don't panic: 42 is the answer, isn't it? The cat sat on the mat.",
    "",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "tokenizer")
    for name, pad_token in (("bert", "[PAD]"), ("xlmr", "<pad>")):
        tok = Tokenizer.from_file(os.path.join(root, name, "tokenizer.json"))
        pad = tok.token_to_id(pad_token)
        lines = []
        for max_length in (4, 8, 64):
            tok.enable_truncation(max_length=max_length)
            tok.enable_padding(pad_id=pad, pad_token=pad_token)
            for text, enc in zip(TEXTS, tok.encode_batch(TEXTS)):
                lines.append("%d\t%d\t%s\t%s\t%s" % (max_length, pad, text.encode("utf-8").hex(),
                                                     " ".join(map(str, enc.ids)),
                                                     " ".join(map(str, enc.attention_mask))))
        with open(os.path.join(root, name, "batch_golden.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(name, len(lines), "rows")


if __name__ == "__main__":
    main()
