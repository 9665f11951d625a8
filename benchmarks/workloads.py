"""The three SNN training workloads of ../shared/reference/performance_anchors.md, section 2.

(a) spiking MLP, (b) spiking VGG-style conv net at T=4, (c) SEW-ResNet-style net; all
multi-step (`step_mode='m'`) SpikingJelly nets. `train_step` is one full step: zero_grad,
forward, loss, backward, optimizer step, reset.
"""

from __future__ import annotations

import torch
from torch import nn

from spikingjelly.activation_based import functional, layer, neuron, surrogate


def _lif(detach_reset=False):
    return neuron.LIFNode(tau=2.0, surrogate_function=surrogate.ATan(), detach_reset=detach_reset)


def mlp():
    net = nn.Sequential(
        layer.Linear(784, 800, bias=False), _lif(), layer.Linear(800, 10, bias=False), _lif()
    )
    with torch.no_grad():
        net[0].weight.normal_(0.002, 0.08)
        net[2].weight.normal_(0.01, 0.1)
    functional.set_step_mode(net, "m")
    x = (torch.rand(8, 64, 784) < 0.2).float()
    target = torch.nn.functional.one_hot(torch.arange(64) % 10, 10).float()
    return net, x, target, lambda out, y: nn.functional.mse_loss(out.mean(0), y)


def vgg():
    def block(c_in, c_out):
        return [layer.Conv2d(c_in, c_out, 3, padding=1), layer.BatchNorm2d(c_out), _lif(detach_reset=True)]

    net = nn.Sequential(
        *block(3, 32), *block(32, 32), layer.MaxPool2d(2), *block(32, 64), *block(64, 64), layer.MaxPool2d(2),
        layer.Flatten(), layer.Linear(64 * 8 * 8, 10),
    )
    functional.set_step_mode(net, "m")
    x = torch.rand(16, 3, 32, 32).unsqueeze(0).repeat(4, 1, 1, 1, 1)
    target = torch.arange(16) % 10
    return net, x, target, lambda out, y: nn.functional.cross_entropy(out.mean(0), y)


class SEWBlock(nn.Module):
    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.body = nn.Sequential(
            layer.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), layer.BatchNorm2d(c_out),
            neuron.IFNode(surrogate_function=surrogate.ATan(), detach_reset=True),
            layer.Conv2d(c_out, c_out, 3, padding=1, bias=False), layer.BatchNorm2d(c_out),
            neuron.IFNode(surrogate_function=surrogate.ATan(), detach_reset=True),
        )
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(
                layer.Conv2d(c_in, c_out, 1, stride=stride, bias=False), layer.BatchNorm2d(c_out),
                neuron.IFNode(surrogate_function=surrogate.ATan(), detach_reset=True),
            )

    def forward(self, x):
        return self.body(x) + (x if self.down is None else self.down(x))


class SEWNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            layer.Conv2d(3, 32, 3, padding=1, bias=False), layer.BatchNorm2d(32),
            neuron.IFNode(surrogate_function=surrogate.ATan(), detach_reset=True),
        )
        self.blocks = nn.Sequential(SEWBlock(32, 32), SEWBlock(32, 64, stride=2), SEWBlock(64, 64))
        self.fc = layer.Linear(64, 10)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((3, 4)))


def sew():
    net = SEWNet()
    functional.set_step_mode(net, "m")
    x = torch.rand(8, 3, 32, 32).unsqueeze(0).repeat(4, 1, 1, 1, 1)
    target = torch.arange(8) % 10
    return net, x, target, lambda out, y: nn.functional.cross_entropy(out.mean(0), y)


WORKLOADS = {"mlp": mlp, "vgg": vgg, "sew": sew}


def make(name: str, optimizer: str = "sgd"):
    torch.manual_seed(0)
    net, x, target, loss_fn = WORKLOADS[name]()
    if optimizer == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    return net, x, target, loss_fn, opt


def train_step(net, x, target, loss_fn, opt, stage=None, before_step=None):
    """One training step; `stage(name)` (a recorder's) labels forward/backward/optimizer;
    `before_step()` runs inside the optimizer stage just before opt.step()."""
    from contextlib import nullcontext

    label = stage or (lambda name: nullcontext())
    opt.zero_grad(set_to_none=True)
    with label("forward"):
        out = net(x)
    loss = loss_fn(out, target)
    with label("backward"):
        loss.backward()
    with label("optimizer"):
        if before_step is not None:
            before_step()
        opt.step()
    functional.reset_net(net)
