"""Gradients with respect to a model's input under a Recorder bound to the model: a gradient
penalty (double backward), a saliency map, and autograd.grad of a two-input module."""

import torch
from torch import nn

from tests.guest.user import recording, report

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
bilinear = nn.Bilinear(6, 6, 2)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(4, 6, requires_grad=True)
y = torch.randn(4, 6, requires_grad=True)
with recording(model=net, optimizer=optimizer) as rec:
    with rec.stage("forward"):
        out = net(x)
        saliency, = torch.autograd.grad(out.sum(), x, retain_graph=True)
        penalty_grad, = torch.autograd.grad(out.sum(), x, create_graph=True)
        loss = out.pow(2).mean() + penalty_grad.norm(2, dim=1).sub(1).pow(2).mean()
        both = bilinear(x, y)
        only_x, = torch.autograd.grad(both.sum(), x)
    with rec.stage("backward"):
        loss.backward()
    with rec.stage("optimizer"):
        optimizer.step()
    rec.step()
report(saliency=saliency, penalty_grad=penalty_grad, only_x=only_x, loss=loss, x_grad=x.grad,
       weights=[p.detach() for p in net.parameters()])
