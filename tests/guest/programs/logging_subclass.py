"""A user's logging tensor subclass (its __torch_function__ keeps a log of every call): the
log of a recorded training step must be the plain run's, call for call."""

import torch
from torch import nn

from tests.guest.user import recording, report

log = []


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        log.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(5, 4).as_subclass(Logged).requires_grad_()
with recording(model=net, optimizer=optimizer) as rec:
    for _ in range(2):
        with rec.stage("forward"):
            out = net(x)
            spikes = (out > 0).float()
            loss = (out * spikes).sum()
        with rec.stage("backward"):
            loss.backward()
        with rec.stage("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        rec.step()
report(log=log, out=out, x_grad=x.grad, out_type=type(out).__name__,
       weights=[p.detach() for p in net.parameters()])
