"""A user who turns every warning into an error: a small spiking-like training step (a
threshold (x > 0).float() as the spike) must run as it runs without capture."""

import warnings

warnings.simplefilter("error")

import torch  # noqa: E402 - after the filter: the user's order, imports included

from tests.guest.user import recording, report  # noqa: E402 - likewise

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(32, 8)
with recording(model=net, optimizer=optimizer) as rec:
    for _ in range(2):
        with rec.stage("forward"):
            hidden = net[0](x)
            spikes = (hidden > 0).float()
            loss = (net[1](spikes * hidden) ** 2).mean()
        with rec.stage("backward"):
            optimizer.zero_grad()
            loss.backward()
        with rec.stage("optimizer"):
            optimizer.step()
        rec.step()
report(loss=loss.detach(), grad=[p.grad for p in net.parameters()], params=[p.detach() for p in net.parameters()])
