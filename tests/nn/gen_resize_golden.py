#!/usr/bin/python3
"""Generates tests/data/resize_golden.safetensors: PyTorch's F.interpolate, F.adaptive_avg_pool2d
and F.pad (float64) on a fixed x [2, 3, 4, 5] for the cases below, with the gradient of
sum(y * dy) for a fixed dy, that tests/nn/resize_parity_test.cc replays with tg::interpolate,
tg::adaptive_avg_pool2d and tg::pad.

Regenerate (needs torch; Debian's interpreter has it, the `python3` on PATH may not):

    /usr/bin/python3 tests/nn/gen_resize_golden.py

The file holds, as F32: "x", and per case "<case>/y", "<case>/dy", "<case>/dx"; its metadata
"cases" lists each case's name and arguments as JSON.
"""
import json
import os

import torch
import torch.nn.functional as F

from golden_file import write_safetensors

SEED = 20261129
CASES = [
    ("nearest_x2", dict(fn="interpolate", scale=2.0, mode="nearest")),
    ("nearest_size", dict(fn="interpolate", size=[7, 8], mode="nearest")),
    ("nearest_down", dict(fn="interpolate", size=[3, 2], mode="nearest")),
    ("nearest_scale_1_5", dict(fn="interpolate", scale=1.5, mode="nearest")),
    ("bilinear_x2", dict(fn="interpolate", scale=2.0, mode="bilinear", align_corners=False)),
    ("bilinear_size", dict(fn="interpolate", size=[7, 9], mode="bilinear", align_corners=False)),
    ("bilinear_corners", dict(fn="interpolate", size=[7, 9], mode="bilinear", align_corners=True)),
    ("bilinear_down", dict(fn="interpolate", size=[3, 2], mode="bilinear", align_corners=False)),
    ("bilinear_scale_0_6", dict(fn="interpolate", scale=0.6, mode="bilinear", align_corners=False)),
    ("adaptive_down", dict(fn="adaptive_avg_pool2d", size=[2, 3])),
    ("adaptive_overlap", dict(fn="adaptive_avg_pool2d", size=[3, 7])),
    ("adaptive_global", dict(fn="adaptive_avg_pool2d", size=[1, 1])),
    ("pad_constant", dict(fn="pad", pads=[1, 2, 0, 3], mode="constant", value=0.5)),
    ("pad_constant_3_axes", dict(fn="pad", pads=[1, 1, 0, 2, 1, 0], mode="constant", value=0.0)),
    ("pad_reflect", dict(fn="pad", pads=[2, 4, 3, 1], mode="reflect")),
    ("pad_replicate", dict(fn="pad", pads=[3, 0, 1, 2], mode="replicate")),
]


def apply(x, args):
    if args["fn"] == "adaptive_avg_pool2d":
        return F.adaptive_avg_pool2d(x, tuple(args["size"]))
    if args["fn"] == "pad":
        return F.pad(x, tuple(args["pads"]), mode=args["mode"], value=args.get("value", 0.0)) \
            if args["mode"] == "constant" else F.pad(x, tuple(args["pads"]), mode=args["mode"])
    kw = {"mode": args["mode"]}
    if "size" in args:
        kw["size"] = tuple(args["size"])
    else:
        kw["scale_factor"] = args["scale"]
    if args["mode"] == "bilinear":
        kw["align_corners"] = args["align_corners"]
    return F.interpolate(x, **kw)


def main():
    torch.manual_seed(SEED)
    x = torch.randn(2, 3, 4, 5)
    tensors = {"x": x}
    for name, args in CASES:
        xd = x.double().requires_grad_(True)
        y = apply(xd, args)
        dy = torch.randn(y.shape, dtype=torch.float64)
        (y * dy).sum().backward()
        tensors[name + "/y"] = y.detach().float()
        tensors[name + "/dy"] = dy.float()
        tensors[name + "/dx"] = xd.grad.float()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "resize_golden.safetensors")
    write_safetensors(out, tensors, {"cases": json.dumps(CASES)})
    print(out, len(CASES), "cases")


if __name__ == "__main__":
    main()
