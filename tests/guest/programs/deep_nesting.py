"""A model nested about as deep as a plain run allows (modules calling modules), trained one
step under a Recorder bound to it."""

import torch
from torch import nn

from tests.guest.user import recording, report


class Nest(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.inner = Nest(depth - 1) if depth else nn.Linear(4, 4)

    def forward(self, x):
        return self.inner(x)


torch.manual_seed(0)
net = Nest(230)  # a plain forward and backward runs to about 245 at the default limit of 1000
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(2, 4)
with recording(model=net, optimizer=optimizer) as rec:
    with rec.stage("forward"):
        loss = net(x).pow(2).sum()
    with rec.stage("backward"):
        loss.backward()
    with rec.stage("optimizer"):
        optimizer.step()
    rec.step()
import sys  # noqa: E402 - what the user sees after the run

report(loss=loss, weight=net.parameters().__next__().detach(), recursion_limit=sys.getrecursionlimit())
