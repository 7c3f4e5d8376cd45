#!/usr/bin/env python3
"""tests/data/nfc_golden.txt for tests/text/nfc_test.cc: strings and their NFC form from
CPython's unicodedata.normalize (its own implementation, not src/text/nfc.cc's tables' use).

Every code point with a canonical decomposition or a non-zero combining class appears alone;
then 3,000 random strings of 2 to 7 code points drawn from those, Hangul jamo and syllables,
and plain letters, so that marks meet starters in every order. One case a line:
<the string's UTF-8 in hex> TAB <its NFC's UTF-8 in hex>.

Usage: python3 tests/text/gen_nfc_golden.py > tests/data/nfc_golden.txt
"""
import random
import sys
import unicodedata

interesting = [cp for cp in range(0x110000)
               if 0xD800 > cp or cp > 0xDFFF
               if unicodedata.combining(chr(cp)) or (unicodedata.decomposition(chr(cp)) and
                                                     not unicodedata.decomposition(chr(cp)).startswith("<"))]
jamo = list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A8, 0x11C3))
syllables = [0xAC00, 0xAC01, 0xB098, 0xD7A3, 0xAC1C]
plain = [ord(c) for c in "aeiouAEOUnNcCsSzZ "] + [0x3B1, 0x3C9, 0x439, 0x627, 0x915, 0x3042]
pool = interesting + jamo * 20 + syllables * 20 + plain * 40
rng = random.Random(7)
cases = [chr(cp) for cp in interesting]
for _ in range(3000):
    cases.append("".join(chr(rng.choice(pool)) for _ in range(rng.randint(2, 7))))
w = sys.stdout.write
for s in cases:
    w("%s\t%s\n" % (s.encode("utf-8").hex(), unicodedata.normalize("NFC", s).encode("utf-8").hex()))
