"""torch_peer.py's timing protocol, shared by the model peers (bert_peer.py, vit_peer.py,
clip_peer.py, t5_peer.py): `warm` calls, then three runs of `iters` calls each, the median
seconds per call; on a GPU every run ends with a synchronize."""
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
