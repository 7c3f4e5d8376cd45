#!/usr/bin/python3
"""Generates tests/data/optim_golden.txt: PyTorch optimizer trajectories that
tests/optim/optimizer_golden_test.cc replays with tensorgrad.

Regenerate (needs torch; Debian's interpreter has it, the `python3` on PATH may not):

    /usr/bin/python3 tests/optim/gen_optim_golden.py

Model: Linear(3→4) → tanh → Linear(4→2), loss = mean((model(x) - y)²) on one fixed batch.
Initial parameters and data are float32 values (so both sides start from identical
numbers); the trajectories are computed in float64 so the reference carries no rounding
of its own. Each case runs 5 optimizer steps and records, per step, the loss computed
before that step's update and every parameter after it.

tensorgrad decays weights (rank ≥ 2) but not biases by default, so every case with weight
decay uses two param groups: weights with weight_decay=wd, biases with weight_decay=0.

File format (one record per line, whitespace separated, floats as Python repr):
    tensor NAME RANK D0 .. D{RANK-1} V0 V1 ...      batch data (x, y)
    init NAME RANK D0 .. V0 V1 ...                  initial parameter
    case NAME                                       starts a case
    step K loss V                                   K = 1..5; V = loss before step K's update
    param NAME RANK D0 .. V0 V1 ...                 parameter after step K
    end                                             ends a case
Lines starting with '#' are comments.
"""
import math
import os

import torch

STEPS = 5
PARAM_NAMES = ["l1.weight", "l1.bias", "l2.weight", "l2.bias"]
OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "optim_golden.txt")


def make_data():
    g = torch.Generator().manual_seed(20240531)
    # Larger-than-default weights so tanh is in its nonlinear range and gradients are O(1).
    init = {
        "l1.weight": (torch.rand(4, 3, generator=g) * 2 - 1) * 0.9,
        "l1.bias": (torch.rand(4, generator=g) * 2 - 1) * 0.5,
        "l2.weight": (torch.rand(2, 4, generator=g) * 2 - 1) * 0.9,
        "l2.bias": (torch.rand(2, generator=g) * 2 - 1) * 0.5,
    }
    x = torch.randn(5, 3, generator=g)
    y = torch.randn(5, 2, generator=g) * 1.5
    return init, x, y


class Net(torch.nn.Module):
    def __init__(self, init):
        super().__init__()
        self.l1 = torch.nn.Linear(3, 4).double()
        self.l2 = torch.nn.Linear(4, 2).double()
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.copy_(init[name].double())

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


def groups(model, wd, decays=lambda name, p: p.dim() >= 2):
    """Two param groups reproducing tensorgrad's per-parameter decay flag."""
    named = list(model.named_parameters())
    yes = [p for n, p in named if decays(n, p)]
    no = [p for n, p in named if not decays(n, p)]
    return [{"params": yes, "weight_decay": wd}, {"params": no, "weight_decay": 0.0}]


def cosine_factor(t, total, min_factor):
    """tensorgrad's lr::cosine (closed form, held at min_factor after total)."""
    frac = min(t, total) / total
    return min_factor + (1 - min_factor) * (1 + math.cos(math.pi * frac)) / 2


# Each case: name → (optimizer factory, scheduler factory or None, clip max_norm or None,
# events). Events: {"set_lr": (after_step, lr)} sets every group's lr after that many
# steps; {"reset": after_step} replaces the optimizer by a fresh one (zero moments, step 0).
CASES = [
    ("sgd_plain", lambda m: torch.optim.SGD(m.parameters(), lr=0.1), None, None, {}),
    ("sgd_momentum", lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), None, None, {}),
    ("sgd_momentum_dampening",
     lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, dampening=0.1), None, None, {}),
    ("sgd_nesterov", lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True), None, None, {}),
    ("sgd_weight_decay", lambda m: torch.optim.SGD(groups(m, 0.2), lr=0.1, momentum=0.5), None, None, {}),
    ("adam_default", lambda m: torch.optim.Adam(m.parameters()), None, None, {}),
    ("adam_weight_decay", lambda m: torch.optim.Adam(groups(m, 0.1), lr=0.01), None, None, {}),
    ("adam_betas_eps", lambda m: torch.optim.Adam(m.parameters(), lr=0.02, betas=(0.8, 0.99), eps=1e-3), None, None, {}),
    ("adamw_weight_decay", lambda m: torch.optim.AdamW(groups(m, 0.1), lr=0.01), None, None, {}),
    # decay_filter = name == "l2.weight": l1.weight is not decayed although it is rank 2.
    ("adamw_decay_filter",
     lambda m: torch.optim.AdamW(groups(m, 0.5, lambda n, p: n == "l2.weight"), lr=0.01), None, None, {}),
    ("adamw_clip", lambda m: torch.optim.AdamW(groups(m, 0.1), lr=0.01), None, 0.5, {}),
    ("adam_linear",
     lambda m: torch.optim.Adam(m.parameters(), lr=0.02),
     lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=3), None, {}),
    ("sgd_momentum_cosine",
     lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4, eta_min=0.1 * 0.1), None, {}),
    ("adamw_warmup_cosine_clip",
     lambda m: torch.optim.AdamW(groups(m, 0.05), lr=0.02),
     lambda o: torch.optim.lr_scheduler.LambdaLR(
         o, lambda t: (t + 1) / 2 if t < 2 else cosine_factor(t - 2, 3, 0.2)), 1.0, {}),
    ("adam_step",
     lambda m: torch.optim.Adam(m.parameters(), lr=0.02),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5), None, {}),
    ("sgd_multi_step",
     lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
     lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[1, 3], gamma=0.5), None, {}),
    ("adam_lambda",
     lambda m: torch.optim.Adam(m.parameters(), lr=0.02),
     lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda t: 1.0 / (1.0 + 0.5 * t)), None, {}),
    ("adam_set_lr", lambda m: torch.optim.Adam(m.parameters(), lr=0.02), None, None, {"set_lr": (2, 0.005)}),
    ("sgd_momentum_set_lr",
     lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), None, None, {"set_lr": (2, 0.03)}),
    ("adam_reset", lambda m: torch.optim.Adam(m.parameters(), lr=0.02), None, None, {"reset": 3}),
    ("sgd_momentum_reset",
     lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), None, None, {"reset": 2}),
]


def fmt(t):
    t = t.detach().double()
    return " ".join([str(t.dim())] + [str(d) for d in t.shape] + [repr(float(v)) for v in t.reshape(-1).tolist()])


def run_case(init, x, y, make_opt, make_sched, clip, events):
    model = Net(init)
    opt = make_opt(model)
    sched = make_sched(opt) if make_sched else None
    records = []
    for k in range(1, STEPS + 1):
        opt.zero_grad()
        loss = torch.mean((model(x) - y) ** 2)
        loss.backward()
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            assert norm > clip, f"clip {clip} inactive at step {k} (grad norm {float(norm)})"
        opt.step()
        if sched:
            sched.step()
        records.append((float(loss), {n: p.detach().clone() for n, p in model.named_parameters()}))
        if events.get("set_lr", (None,))[0] == k:
            for group in opt.param_groups:
                group["lr"] = events["set_lr"][1]
        if events.get("reset") == k:
            opt = make_opt(model)
    return records


def main():
    init, x, y = make_data()
    xd, yd = x.double(), y.double()
    lines = ["# Generated by tests/optim/gen_optim_golden.py (torch %s); do not edit." % torch.__version__,
             "# Regenerate: /usr/bin/python3 tests/optim/gen_optim_golden.py",
             "tensor x " + fmt(x), "tensor y " + fmt(y)]
    lines += ["init %s %s" % (n, fmt(init[n])) for n in PARAM_NAMES]
    for name, make_opt, make_sched, clip, events in CASES:
        lines.append("case " + name)
        for k, (loss, params) in enumerate(run_case(init, xd, yd, make_opt, make_sched, clip, events), start=1):
            lines.append("step %d loss %r" % (k, loss))
            lines += ["param %s %s" % (n, fmt(params[n])) for n in PARAM_NAMES]
        lines.append("end")
    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    with open(OUT_PATH, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s (%d cases, %d bytes)" % (os.path.normpath(OUT_PATH), len(CASES), os.path.getsize(OUT_PATH)))


if __name__ == "__main__":
    main()
