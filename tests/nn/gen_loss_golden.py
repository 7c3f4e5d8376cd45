#!/usr/bin/python3
"""Generates tests/data/loss_golden.safetensors: PyTorch's losses and activations (float64, from
float32 inputs) that tests/nn/loss_parity_test.cc replays with tg's.

Regenerate (needs torch; Debian's interpreter has it, the `python3` on PATH may not):

    /usr/bin/python3 tests/nn/gen_loss_golden.py

Per case, F32 unless noted: "<case>/x" (prediction, probabilities, logits, log-probabilities or
the activation's input), "<case>/t" (target; I32 class indices for nll and cross_entropy),
"<case>/w" (pos_weight, where given), "<case>/none" (reduction "none"), "<case>/mean" and
"<case>/sum" (the other reductions; losses only), "<case>/dy" (a cotangent) and "<case>/dx"
(the gradient of sum(none · dy) with respect to x). The metadata "cases" lists
[name, function, parameters] as JSON. Inputs include the points where a function changes
branch (0, ±3, |x − t| = beta), so each side's gradient convention is checked.
"""
import json
import os

import torch
import torch.nn.functional as F

from golden_file import write_safetensors

SEED = 20261129
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "loss_golden.safetensors")


def main():
    torch.manual_seed(SEED)
    tensors, cases = {}, []

    def add(name, fn, params, x, t=None, w=None, loss=True):
        xd = x.double().requires_grad_(True)
        td = t.double() if t is not None and t.dtype == torch.float32 else t
        wd = w.double() if w is not None else None
        call = {
            "mse_loss": lambda r: F.mse_loss(xd, td.expand_as(xd), reduction=r),
            "l1_loss": lambda r: F.l1_loss(xd, td.expand_as(xd), reduction=r),
            "smooth_l1_loss": lambda r: F.smooth_l1_loss(xd, td.expand_as(xd), reduction=r, beta=params.get("beta", 1.0)),
            "huber_loss": lambda r: F.huber_loss(xd, td.expand_as(xd), reduction=r, delta=params.get("delta", 1.0)),
            "binary_cross_entropy": lambda r: F.binary_cross_entropy(xd, td.expand_as(xd), reduction=r),
            "binary_cross_entropy_with_logits":
                lambda r: F.binary_cross_entropy_with_logits(xd, td.expand_as(xd), reduction=r, pos_weight=wd),
            "nll_loss": lambda r: F.nll_loss(xd, t.long(), reduction=r, ignore_index=params["ignore_index"]),
            "cross_entropy": lambda r: F.cross_entropy(xd, t.long(), reduction=r, ignore_index=params["ignore_index"],
                                                       label_smoothing=params["label_smoothing"]),
            "leaky_relu": lambda r: F.leaky_relu(xd, params["slope"]),
            "elu": lambda r: F.elu(xd, params["alpha"]),
            "clamp": lambda r: torch.clamp(xd, params["lo"], params["hi"]),
            "hardsigmoid": lambda r: F.hardsigmoid(xd),
            "hardswish": lambda r: F.hardswish(xd),
            "mish": lambda r: F.mish(xd),
            "logsigmoid": lambda r: F.logsigmoid(xd),
        }[fn]
        none = call("none")
        dy = torch.randn(none.shape, dtype=torch.float64)
        (none * dy).sum().backward()
        tensors[name + "/x"] = x
        if t is not None:
            tensors[name + "/t"] = t
        if w is not None:
            tensors[name + "/w"] = w
        tensors[name + "/none"] = none.detach().float()
        tensors[name + "/dy"] = dy.float()
        tensors[name + "/dx"] = xd.grad.float()
        if loss:
            tensors[name + "/mean"] = call("mean").detach().float().reshape(1)
            tensors[name + "/sum"] = call("sum").detach().float().reshape(1)
        cases.append([name, fn, params])

    pred = torch.randn(4, 5)
    target = torch.randn(4, 5)
    pred[0, 0] = target[0, 0]                  # d = 0
    pred[0, 1] = target[0, 1] + 0.5            # |d| = beta of smooth_l1 below
    pred[0, 2] = target[0, 2] - 0.5
    pred[0, 3] = target[0, 3] + 0.75           # |d| = delta of huber below (0.75 is exact in f32)
    add("mse", "mse_loss", {}, pred, target)
    add("mse_row_target", "mse_loss", {}, pred, target[0])  # broadcast over the rows
    add("l1", "l1_loss", {}, pred, target)
    add("smooth_l1", "smooth_l1_loss", {"beta": 0.5}, pred, target)
    # beta 0 is l1_loss, but away from d = 0, where PyTorch 1.13's gradient is -1 (l1's is 0).
    shifted = pred.clone()
    shifted[0, 0] += 0.25
    add("smooth_l1_beta0", "smooth_l1_loss", {"beta": 0.0}, shifted, target)
    add("huber", "huber_loss", {"delta": 0.75}, pred, target)
    probs = torch.rand(3, 4) * 0.98 + 0.01
    probs[0, 0], probs[0, 1] = 0.0, 1.0        # the logs clamp at -100
    soft = torch.rand(3, 4)
    soft[0, 0], soft[0, 1] = 0.0, 1.0
    add("bce", "binary_cross_entropy", {}, probs, soft)
    logits = torch.randn(3, 5) * 3
    logits[0, :] = torch.tensor([0.0, 30.0, -30.0, 100.0, -100.0])
    add("bce_logits", "binary_cross_entropy_with_logits", {}, logits, torch.rand(3, 5))
    add("bce_logits_pos_weight", "binary_cross_entropy_with_logits", {"pos_weight": True}, logits, torch.rand(3, 5),
        w=torch.rand(5) * 3)
    classes = torch.randn(6, 7) * 2
    labels = torch.randint(0, 7, (6,), dtype=torch.int32)
    labels[2] = -100
    add("nll", "nll_loss", {"ignore_index": -100}, F.log_softmax(classes, -1), labels)
    add("ce_smoothing", "cross_entropy", {"ignore_index": -100, "label_smoothing": 0.1}, classes, labels)
    add("ce_smoothing_ignore_3", "cross_entropy", {"ignore_index": 3, "label_smoothing": 0.25}, classes,
        torch.tensor([3, 0, 6, 3, 1, 2], dtype=torch.int32))
    x = torch.cat([torch.tensor([0.0, -3.0, 3.0, -0.5, 0.75, 25.0, -25.0]), torch.randn(13) * 3])
    add("leaky_relu", "leaky_relu", {"slope": 0.1}, x, loss=False)
    add("elu", "elu", {"alpha": 1.25}, x, loss=False)
    add("clamp", "clamp", {"lo": -0.5, "hi": 0.75}, x, loss=False)
    for fn in ("hardsigmoid", "hardswish", "mish", "logsigmoid"):
        add(fn, fn, {}, x, loss=False)
    write_safetensors(OUT, tensors, {"cases": json.dumps(cases)})
    print("wrote", OUT, len(cases), "cases")


if __name__ == "__main__":
    main()
