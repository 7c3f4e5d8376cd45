#!/usr/bin/python3
"""Generates tests/data/interpolate_golden.safetensors: PyTorch's F.interpolate (float64) on a
fixed x [2, 3, 4, 5] for the cases below, with the gradient of sum(y * dy) for a fixed dy, that
tests/nn/interpolate_parity_test.cc replays with tg::interpolate.

Regenerate (needs torch; Debian's interpreter has it, the `python3` on PATH may not):

    /usr/bin/python3 tests/nn/gen_interpolate_golden.py

The file holds, as F32: "x", and per case "<case>/y", "<case>/dy", "<case>/dx"; its metadata
"cases" lists each case's name and arguments as JSON (size or scale, mode, align_corners).
"""
import json
import os

import torch
import torch.nn.functional as F

from golden_file import write_safetensors

SEED = 20261129
CASES = [
    ("nearest_x2", dict(scale=2.0, mode="nearest")),
    ("nearest_size", dict(size=[7, 8], mode="nearest")),
    ("nearest_down", dict(size=[3, 2], mode="nearest")),
    ("nearest_scale_1_5", dict(scale=1.5, mode="nearest")),
    ("bilinear_x2", dict(scale=2.0, mode="bilinear", align_corners=False)),
    ("bilinear_size", dict(size=[7, 9], mode="bilinear", align_corners=False)),
    ("bilinear_corners", dict(size=[7, 9], mode="bilinear", align_corners=True)),
    ("bilinear_down", dict(size=[3, 2], mode="bilinear", align_corners=False)),
    ("bilinear_scale_0_6", dict(scale=0.6, mode="bilinear", align_corners=False)),
]


def main():
    torch.manual_seed(SEED)
    x = torch.randn(2, 3, 4, 5)
    tensors = {"x": x}
    for name, args in CASES:
        xd = x.double().requires_grad_(True)
        kw = {"mode": args["mode"]}
        if "size" in args:
            kw["size"] = tuple(args["size"])
        else:
            kw["scale_factor"] = args["scale"]
        if args["mode"] == "bilinear":
            kw["align_corners"] = args["align_corners"]
        y = F.interpolate(xd, **kw)
        dy = torch.randn(y.shape, dtype=torch.float64)
        (y * dy).sum().backward()
        tensors[name + "/y"] = y.detach().float()
        tensors[name + "/dy"] = dy.float()
        tensors[name + "/dx"] = xd.grad.float()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "interpolate_golden.safetensors")
    write_safetensors(out, tensors, {"cases": json.dumps(CASES)})
    print(out, len(CASES), "cases")


if __name__ == "__main__":
    main()
