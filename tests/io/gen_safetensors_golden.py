#!/usr/bin/python3
"""PyTorch interop for tensorgrad's safetensors checkpoints (tests/io/safetensors_test.cc).

The `safetensors` package is not installed on Debian, so this script carries its own
reader and writer (json + struct + torch.frombuffer) that follow the official library's
rules: an 8-byte little-endian header length, a compact JSON header with "__metadata__"
first and tensors ordered by dtype alignment (F32, I32, BOOL) then name, padded with
spaces to a multiple of 8 bytes, then contiguous little-endian data, offsets relative to
the data section.

Generate the golden files (run with Debian's interpreter, which has torch):

    /usr/bin/python3 tests/io/gen_safetensors_golden.py

writes tests/data/torch_written.safetensors (the parameters of Linear(3→4) → Linear(4→2),
named as in torch's state_dict, plus metadata) and tests/data/torch_written_expected.txt
(the same values as text: the C++ test loads the .safetensors into its Net and compares).

Check a file written by tensorgrad:

    TG_WRITE_SAFETENSORS=/tmp/tg_written.safetensors build/tests/safetensors_test
    /usr/bin/python3 tests/io/gen_safetensors_golden.py --check /tmp/tg_written.safetensors
    /usr/bin/python3 tests/io/gen_safetensors_golden.py --check /tmp/tg_written_mixed.safetensors

reads it into torch tensors, compares every tensor bit for bit with the expected values
(the four parameters, and for the mixed file an I32 scalar and a BOOL vector), checks the
metadata, and checks that the file's bytes equal this script's official-layout
serialization of the same tensors. Exit status 0 means every check passed.

Expected-values format (one record per line; '#' starts a comment):
    metadata JSON                        the "__metadata__" object
    tensor NAME DTYPE RANK D0 .. V0 V1   values as Python repr (exact for float32)
"""
import json
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
GOLDEN_PATH = os.path.join(DATA, "torch_written.safetensors")
EXPECTED_PATH = os.path.join(DATA, "torch_written_expected.txt")

# name ↔ torch dtype ↔ struct format; ORDER is the official writer's (alignment, descending).
DTYPES = {"F32": (torch.float32, "f"), "I32": (torch.int32, "i"), "BOOL": (torch.bool, "?")}
ORDER = {"F32": 2, "I32": 1, "BOOL": 0}
TORCH_TO_NAME = {v[0]: k for k, v in DTYPES.items()}

# Metadata with escapes and non-ASCII text, to exercise both JSON implementations.
METADATA = {"format": "pt", "source": "gen_safetensors_golden.py", "note": 'quote " backslash \\ tab\tü→'}


def params():
    """The Net of the C++ test: l1 = Linear(3, 4), l2 = Linear(4, 2), torch layouts."""
    return {
        "l1.weight": torch.arange(12, dtype=torch.float32).reshape(4, 3) / 10,  # 0.1 etc.: not exact in binary
        "l1.bias": torch.tensor([-0.5, 0.25, 1.0 / 3.0, 1e-3], dtype=torch.float32),
        "l2.weight": (torch.arange(8, dtype=torch.float32).reshape(2, 4) - 3.5) / 7,
        "l2.bias": torch.tensor([0.125, -2.75], dtype=torch.float32),
    }


def extras():
    """Non-parameter tensors in the mixed-dtype file tensorgrad writes."""
    return {"extra.step": torch.tensor(1234, dtype=torch.int32),
            "extra.mask": torch.tensor([True, False, True])}


def tensor_bytes(t):
    name = TORCH_TO_NAME[t.dtype]
    values = t.contiguous().flatten().tolist()
    return struct.pack("<%d%s" % (len(values), DTYPES[name][1]), *values)


def serialize(tensors, metadata):
    """The bytes the official safetensors writer produces for these tensors."""
    order = sorted(tensors, key=lambda n: (-ORDER[TORCH_TO_NAME[tensors[n].dtype]], n.encode("utf-8")))
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    for name in order:
        t = tensors[name]
        blob = tensor_bytes(t)
        header[name] = {"dtype": TORCH_TO_NAME[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def deserialize(raw):
    """Parses and validates a safetensors file as the official reader does."""
    if len(raw) < 8:
        raise ValueError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > 100_000_000 or 8 + n > len(raw):
        raise ValueError("bad header length %d" % n)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors, cursor = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, end = info["data_offsets"]
        dtype, fmt = DTYPES[info["dtype"]]
        count = 1
        for d in info["shape"]:
            count *= d
        if begin != cursor or end < begin or end > len(data) or end - begin != count * struct.calcsize(fmt):
            raise ValueError("tensor %r: bad data_offsets %r" % (name, info["data_offsets"]))
        chunk = bytearray(data[begin:end])
        flat = torch.frombuffer(chunk, dtype=dtype) if chunk else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(info["shape"])
        cursor = end
    if cursor != len(data):
        raise ValueError("%d bytes after the last tensor" % (len(data) - cursor))
    return tensors, metadata, n


def generate():
    tensors = params()
    raw = serialize(tensors, METADATA)
    back, meta, _ = deserialize(raw)  # our own reader must agree with our writer
    assert meta == METADATA and all(torch.equal(back[k], v) for k, v in tensors.items())
    with open(GOLDEN_PATH, "wb") as f:
        f.write(raw)
    with open(EXPECTED_PATH, "w", encoding="utf-8") as f:
        f.write("# Generated by tests/io/gen_safetensors_golden.py (torch %s); do not edit.\n" % torch.__version__)
        f.write("# The values stored in torch_written.safetensors.\n")
        f.write("metadata %s\n" % json.dumps(METADATA, sort_keys=True, ensure_ascii=False))
        for name, t in sorted(tensors.items()):
            values = " ".join(repr(v) for v in t.flatten().tolist())
            f.write("tensor %s %s %d %s %s\n" % (name, TORCH_TO_NAME[t.dtype], t.dim(), " ".join(map(str, t.shape)), values))
    print("wrote %s (%d bytes) and %s" % (GOLDEN_PATH, len(raw), EXPECTED_PATH))


def check(path):
    with open(path, "rb") as f:
        raw = f.read()
    tensors, metadata, header_len = deserialize(raw)
    expected = dict(params())
    expected.update(extras())
    failures = []
    for name, t in sorted(tensors.items()):
        print("%-10s %-5s %-14s %s" % (name, TORCH_TO_NAME[t.dtype], list(t.shape), t.flatten().tolist()))
        want = expected.get(name)
        if want is None:
            failures.append("unexpected tensor %r" % name)
        elif want.dtype != t.dtype or want.shape != t.shape or not torch.equal(want, t):
            failures.append("tensor %r differs from the expected %r" % (name, want))
    for name in params():
        if name not in tensors:
            failures.append("missing tensor %r" % name)
    print("metadata", json.dumps(metadata, ensure_ascii=False))
    if metadata != METADATA:
        failures.append("metadata %r != expected %r" % (metadata, METADATA))
    if header_len % 8 != 0:
        failures.append("header length %d is not a multiple of 8" % header_len)
    if raw != serialize(tensors, metadata):
        failures.append("bytes differ from the official layout of the same tensors")
    for msg in failures:
        print("FAIL:", msg)
    print("%s: %s (%d tensors, %d bytes)" % (path, "FAILED" if failures else "OK", len(tensors), len(raw)))
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) != 1:
        sys.exit("usage: %s [--check FILE]" % sys.argv[0])
    generate()
