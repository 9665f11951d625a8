"""record_training_step (restoring state) called on a model the user keeps training: the
param groups and state tensors the user holds must still drive the optimizer afterwards."""

import torch
from torch import nn

from tests.guest.user import TRACE, report

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(5, 5), nn.ReLU(), nn.Linear(5, 2))
adam = torch.optim.Adam(net.parameters(), lr=0.01)
x, target = torch.randn(8, 5), torch.randint(0, 2, (8,))
loss_fn = nn.CrossEntropyLoss()
# A first real step, so the optimizer has state (Adam's moments) the user may hold.
loss_fn(net(x), target).backward()
adam.step()
adam.zero_grad()
group = adam.param_groups[0]
moments = adam.state[net[0].weight]["exp_avg"]
if TRACE is not None:
    from spiketrace.capture import record_training_step

    record_training_step(TRACE, net, x, target=target, loss_fn=loss_fn, optimizer=adam)
# The user freezes the run through the objects they hold: nothing may move now.
group["lr"] = 0.0
before = [p.detach().clone() for p in net.parameters()]
loss_fn(net(x), target).backward()
adam.step()
report(moved=[not torch.equal(a, p) for a, p in zip(before, net.parameters())],
       group_is_live=group is adam.param_groups[0], moments_are_live=moments is adam.state[net[0].weight]["exp_avg"],
       moments=moments, step=adam.state[net[0].weight]["step"], weights=[p.detach() for p in net.parameters()])
