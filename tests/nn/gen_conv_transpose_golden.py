#!/usr/bin/python3
"""Generates tests/data/conv_transpose_golden.safetensors: a PyTorch (float64) reference of a
small decoder of two transposed convolutions that tests/nn/conv_transpose_parity_test.cc replays
with tensorgrad's nn::ConvTranspose2d.

Regenerate (needs torch; Debian's interpreter has it, the `python3` on PATH may not):

    /usr/bin/python3 tests/nn/gen_conv_transpose_golden.py

The model (names as tensorgrad's and PyTorch's state_dict):
    up1: ConvTranspose2d(4 -> 6, 3x3, stride 2, padding 1, output_padding 1, groups 2) -> relu
    up2: ConvTranspose2d(6 -> 3, 2x3, stride (1, 2), padding (0, 1), dilation (1, 2), no bias)
    loss = mean((up2(relu(up1(x))) - target)^2), batch 2 of 4x3x5 inputs (output 2x3x7x21)
The parameters are PyTorch's default initialisation (float32, seeded); the computation runs in
float64 from those values. The file holds, as F32: "param/<name>" (initial values),
"grad/<name>" (d loss / d param, float64), "x", "target"; its metadata the float64 loss.
"""
import json
import os

import torch
import torch.nn as nn

from golden_file import write_safetensors

SEED = 20261129


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1 = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up2 = nn.ConvTranspose2d(6, 3, (2, 3), stride=(1, 2), padding=(0, 1), dilation=(1, 2), bias=False)

    def forward(self, x):
        return self.up2(torch.relu(self.up1(x)))


def main():
    torch.manual_seed(SEED)
    net = Decoder()
    x = torch.randn(2, 4, 3, 5)
    with torch.no_grad():
        shape = net(x).shape
    target = torch.randn(shape)
    params = {name: p.detach().clone() for name, p in net.named_parameters()}
    net64 = Decoder().double()
    net64.load_state_dict({k: v.double() for k, v in params.items()})
    loss = ((net64(x.double()) - target.double()) ** 2).mean()
    loss.backward()
    tensors = {"x": x, "target": target}
    for name, p in net64.named_parameters():
        tensors["param/" + name] = params[name]
        tensors["grad/" + name] = p.grad.float()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "conv_transpose_golden.safetensors")
    write_safetensors(out, tensors, {"loss": repr(loss.item()), "output_shape": json.dumps(list(shape))})
    print(out, "loss", loss.item(), "output", list(shape))


if __name__ == "__main__":
    main()
