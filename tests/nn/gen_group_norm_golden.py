#!/usr/bin/python3
"""Generates tests/data/group_norm_golden.safetensors: PyTorch's F.group_norm (float64) for the
cases below, with the gradients of sum(y * dy) for a fixed dy, that
tests/nn/group_norm_parity_test.cc replays with tg::group_norm.

Regenerate (needs torch; Debian's interpreter has it, the `python3` on PATH may not):

    /usr/bin/python3 tests/nn/gen_group_norm_golden.py

The file holds, as F32, per case "<case>/x", "<case>/weight" and "<case>/bias" (affine cases),
"<case>/y", "<case>/dy", "<case>/dx", "<case>/dweight", "<case>/dbias"; its metadata "cases"
lists each case's name, groups, eps and whether it is affine, as JSON.
"""
import json
import os

import torch
import torch.nn.functional as F

from golden_file import write_safetensors

SEED = 20261129
CASES = [
    ("image_3_groups", dict(shape=[2, 6, 3, 4], groups=3, eps=1e-5, affine=True)),
    ("sequence_2_groups_plain", dict(shape=[3, 4, 5], groups=2, eps=1e-3, affine=False)),
    ("one_group_per_channel", dict(shape=[2, 4, 2, 3], groups=4, eps=1e-5, affine=True)),
]


def main():
    torch.manual_seed(SEED)
    tensors = {}
    for name, args in CASES:
        x = torch.randn(args["shape"]) * 3 + 1
        c = args["shape"][1]
        xd = x.double().requires_grad_(True)
        tensors[name + "/x"] = x
        w = b = None
        if args["affine"]:
            w32, b32 = torch.randn(c), torch.randn(c)
            tensors[name + "/weight"], tensors[name + "/bias"] = w32, b32
            w, b = w32.double().requires_grad_(True), b32.double().requires_grad_(True)
        y = F.group_norm(xd, args["groups"], w, b, args["eps"])
        dy = torch.randn(y.shape, dtype=torch.float64)
        (y * dy).sum().backward()
        tensors[name + "/y"] = y.detach().float()
        tensors[name + "/dy"] = dy.float()
        tensors[name + "/dx"] = xd.grad.float()
        if args["affine"]:
            tensors[name + "/dweight"], tensors[name + "/dbias"] = w.grad.float(), b.grad.float()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "group_norm_golden.safetensors")
    write_safetensors(out, tensors, {"cases": json.dumps(CASES)})
    print(out, len(CASES), "cases")


if __name__ == "__main__":
    main()
