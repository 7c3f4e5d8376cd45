#!/usr/bin/python3
"""Generates tests/data/cnn_golden.safetensors: a PyTorch (float64) reference of a small CNN
(conv, batch norm, both pools, a grouped strided conv, linear) that tests/nn/cnn_parity_test.cc
replays with tensorgrad's nn::Conv2d, nn::BatchNorm2d and the pools.

Regenerate (needs torch; Debian's interpreter has it, the `python3` on PATH may not):

    /usr/bin/python3 tests/nn/gen_cnn_golden.py

The model (names as tensorgrad's and PyTorch's state_dict):
    conv1: Conv2d(2 -> 4, 3x3, padding 1, no bias) -> bn: BatchNorm2d(4) -> relu -> max_pool2d(2)
    conv2: Conv2d(4 -> 6, 3x3, stride 2, padding 1, groups 2) -> relu -> avg_pool2d(2, stride 1)
    flatten -> fc: Linear(6 -> 7); loss = mean cross-entropy (batch 5 of 2x9x9 images)
The parameters are PyTorch's default initialisation (float32, seeded); the computation runs in
float64 from those values. Three SGD steps (lr 0.1) follow in training mode.

The file holds, as F32 (I32 for targets): "param/<name>" (initial values), "grad/<name>"
(d loss / d param at those values, float64), "x", "targets", "running_mean" and "running_var"
(batch norm's running statistics after the three steps); its metadata holds the float64 losses
of the three steps and the evaluation-mode loss after them, as text. It also writes
tests/data/cnn_state_dict.safetensors: the trained model's state_dict (weights and batch-norm
buffers, float32) as a PyTorch user would export it.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from golden_file import write_safetensors

BATCH, IN_CH, SIZE, CLASSES = 5, 2, 9, 7
SEED = 20261127
LR = 0.1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(IN_CH, 4, 3, padding=1, bias=False)  # batch norm follows
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
        self.fc = nn.Linear(6 * 1 * 1, CLASSES)

    def forward(self, x, targets):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)        # [B, 4, 4, 4]
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2, stride=1)       # [B, 6, 1, 1]
        return F.cross_entropy(self.fc(x.flatten(1)), targets)


def main():
    torch.manual_seed(SEED)
    net32 = Net()
    # Non-trivial affine parameters (PyTorch starts them at 1 and 0).
    with torch.no_grad():
        net32.bn.weight.uniform_(0.5, 1.5)
        net32.bn.bias.uniform_(-0.5, 0.5)
    x = torch.randn(BATCH, IN_CH, SIZE, SIZE)
    targets = torch.randint(0, CLASSES, (BATCH,))
    params32 = {k: v.detach().clone() for k, v in net32.named_parameters()}
    net = Net().double()
    net.load_state_dict({k: v.double() for k, v in net32.state_dict().items()})
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    losses, grads = [], {}
    for step in range(3):
        opt.zero_grad()
        loss = net(x.double(), targets)
        loss.backward()
        if step == 0:
            grads = {k: v.grad.detach().float().clone() for k, v in net.named_parameters()}
        losses.append(loss.item())
        opt.step()
    net.eval()
    with torch.no_grad():
        eval_loss = net(x.double(), targets).item()
    tensors = {"x": x, "targets": targets.int(),
               "running_mean": net.bn.running_mean.float(), "running_var": net.bn.running_var.float()}
    for k, v in params32.items():
        tensors["param/" + k] = v
    for k, v in grads.items():
        tensors["grad/" + k] = v
    meta = {"losses": json.dumps(losses), "eval_loss": repr(eval_loss), "lr": repr(LR), "torch": torch.__version__}
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "cnn_golden.safetensors")
    write_safetensors(out, tensors, meta)
    # The trained model's state_dict as PyTorch users export it (float32; num_batches_tracked,
    # an int64 buffer, left out), which tensorgrad must load directly, running statistics included.
    sd = {k: v.float() for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    write_safetensors(os.path.join(os.path.dirname(out), "cnn_state_dict.safetensors"), sd, {"eval_loss": repr(eval_loss)})
    print(f"wrote {os.path.normpath(out)}: losses {losses}, eval loss {eval_loss}")


if __name__ == "__main__":
    main()
