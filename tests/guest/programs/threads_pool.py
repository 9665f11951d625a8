"""A ThreadPoolExecutor created inside the recorder, doing tensor work through pool.map; the
main thread does one task of the same work first, for the test to compare with."""

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
weights = torch.randn(16, 16)
inputs = [torch.randn(4, 16) for _ in range(4)]
together = threading.Barrier(3)  # each of the three tasks on a pool thread of its own


def work(i):
    spikes = (inputs[i] @ weights > 0.5).float()
    return torch.sigmoid(spikes @ weights.t()).sum(dim=1) * 2


def task(i):
    together.wait()
    return work(i)


with recording() as rec:
    with rec.stage("forward"):
        first = work(0)
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="pool") as pool:
            rest = list(pool.map(task, (1, 2, 3)))
report(results=[first, *rest])
