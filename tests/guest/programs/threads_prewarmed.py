"""A ThreadPoolExecutor created and warmed up (both its threads started) before the recorder
opened, doing tensor work inside it: threads the capture cannot reach on Python 3.11."""

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
weights = torch.randn(16, 16)
inputs = [torch.randn(4, 16) for _ in range(3)]
together = threading.Barrier(2)  # each task on a thread of its own
pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="prewarmed")
list(pool.map(lambda _: together.wait(), range(2)))  # both threads exist before the capture opens


def work(i):
    return torch.relu(inputs[i] @ weights).sum(dim=0)


def task(i):
    together.wait()
    return work(i)


with recording() as rec:
    with rec.stage("forward"):
        first = work(0)
        rest = list(pool.map(task, (1, 2)))
pool.shutdown()
report(results=[first, *rest])
