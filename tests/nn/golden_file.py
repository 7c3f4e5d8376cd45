"""write_safetensors for the golden generators of tests/nn (gen_mamba_golden.py,
gen_cnn_golden.py): F32 and I32 torch tensors in file order, the header padded to 8 bytes."""
import json
import struct

import torch


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        dtype = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
