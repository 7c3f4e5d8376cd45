"""torch_peer.py's timing protocol, shared by the model peers (bert_peer.py, vit_peer.py,
clip_peer.py, t5_peer.py, whisper_peer.py): `warm` calls, then three runs of `iters` calls each,
the median seconds per call; on a GPU every run ends with a synchronize. train_seconds times an
optimizer step of a loss function that way; print_peak reports the GPU's peak memory since the
last report."""
import time

import torch


def median_seconds(step, warm, iters, gpu):
    def sync():
        if gpu:
            torch.cuda.synchronize()
    for _ in range(warm):
        step()
    sync()
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        runs.append((time.perf_counter() - t) / iters)
    return sorted(runs)[1]


def train_seconds(loss, opt, gpu):
    """One training step (zero the gradients, backward of loss(), the optimizer's step), timed as
    median_seconds times it: 3 warm-up steps and runs of 10 on a GPU, 1 and 1 on the CPU."""
    def step():
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()
    return median_seconds(step, 3 if gpu else 1, 10 if gpu else 1, gpu)


def print_peak(workload, mode, gpu, width=14):
    if gpu:
        print('%-*s %-14s peak %.0f MiB' % (width, workload, mode, torch.cuda.max_memory_allocated() / 2**20))
        torch.cuda.reset_peak_memory_stats()
