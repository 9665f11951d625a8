"""A pool thread started inside the recorder that outlives it: its ops after the close run as
they would without capture (its dispatch mode stack empty again), and nothing is written into
the trace after the close."""

import os
from concurrent.futures import ThreadPoolExecutor

import torch

from tests.guest.user import TRACE, recording, report

torch.manual_seed(0)
x = torch.randn(8, 8)


def files(root):
    """Every file of the trace with its size and modification time (nothing for a plain run)."""
    if root is None:
        return {}
    return {os.path.join(d, f): (os.stat(os.path.join(d, f)).st_size, os.stat(os.path.join(d, f)).st_mtime_ns)
            for d, _, names in os.walk(root) for f in names}


pool = ThreadPoolExecutor(max_workers=1)
with recording() as rec:
    with rec.stage("forward"):
        inside = pool.submit(lambda: (x @ x).relu()).result()
closed = files(TRACE)
after = [pool.submit(lambda: torch.tanh(x @ x) + 1).result() for _ in range(3)]
stack = pool.submit(torch._C._len_torch_dispatch_stack).result()  # the capture's mode left the thread
again = pool.submit(lambda: (x * 3).sum()).result()
pool.shutdown()
report(inside=inside, after=after, again=again, stack_after_close=stack, trace_unchanged=files(TRACE) == closed)
