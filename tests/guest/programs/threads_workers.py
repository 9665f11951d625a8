"""Three threading.Thread workers started and joined inside a recorded stage, each running a
forward of a shared model and the gradient with respect to its own input; the main thread
runs the same work once, for the test to compare each worker's events with.

No model is bound: torch.autograd.grad with respect to an input under a Recorder bound to the
model raised in capture/modules/tracker.py when this was written (tests/guest/programs/grad_wrt_input.py)."""

import threading

import torch
from torch import nn

from tests.guest.user import recording, report

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
inputs = [torch.randn(5, 8, requires_grad=True) for _ in range(4)]
results = {}
together = threading.Barrier(3)  # all three alive at once, so each is a thread of its own


def work(i):
    x = inputs[i]
    out = net(x)
    grad, = torch.autograd.grad(out.sum(), x)
    return out.detach(), grad


def worker(i):
    together.wait()
    results[i] = work(i)


with recording() as rec:
    with rec.stage("forward"):
        results[0] = work(0)
        threads = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}") for i in (1, 2, 3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
report(outputs=[results[i][0] for i in range(4)], grads=[results[i][1] for i in range(4)],
       net_grads=[p.grad for p in net.parameters()])
