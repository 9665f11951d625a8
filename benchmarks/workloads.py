"""The training workloads the capture benchmark measures.

The three SNN workloads of ../shared/reference/performance_anchors.md, section 2: (a) spiking
MLP, (b) spiking VGG-style conv net at T=4, (c) SEW-ResNet-style net; and, as users run them,
(d) a spiking ResNet-18 on 32x32 input, (e) a small Spikformer (spiking self-attention with
bmm) and (f) a plain 2-layer nn.TransformerEncoder. The SNNs are multi-step
(`step_mode='m'`) SpikingJelly nets. `train_step` is one full step: zero_grad,
forward, loss, backward, optimizer step, reset.
"""

from __future__ import annotations

import torch
from spikingjelly.activation_based import functional, layer, neuron, surrogate
from torch import nn


def _lif(detach_reset=False):
    return neuron.LIFNode(tau=2.0, surrogate_function=surrogate.ATan(), detach_reset=detach_reset)


def _classify_images(net, steps: int, batch: int):
    """Multi-step `net` classifying `batch` random 32x32 RGB images shown for `steps` time steps."""
    functional.set_step_mode(net, "m")
    x = torch.rand(batch, 3, 32, 32).unsqueeze(0).repeat(steps, 1, 1, 1, 1)
    target = torch.arange(batch) % 10
    return net, x, target, lambda out, y: nn.functional.cross_entropy(out.mean(0), y)


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
    return _classify_images(net, steps=4, batch=16)


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
    return _classify_images(SEWNet(), steps=4, batch=8)


class BasicBlock(nn.Module):
    """ResNet's basic block with a spiking neuron after each BN (Spiking ResNet, Zheng et al.)."""

    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1 = layer.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = layer.BatchNorm2d(c_out)
        self.sn1 = neuron.IFNode(surrogate_function=surrogate.ATan(), detach_reset=True)
        self.conv2 = layer.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = layer.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                layer.Conv2d(c_in, c_out, 1, stride=stride, bias=False), layer.BatchNorm2d(c_out))
        self.sn2 = neuron.IFNode(surrogate_function=surrogate.ATan(), detach_reset=True)

    def forward(self, x):
        out = self.sn1(self.bn1(self.conv1(x)))
        return self.sn2(self.bn2(self.conv2(out)) + self.shortcut(x))


class SpikingResNet18(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(layer.Conv2d(3, 64, 3, padding=1, bias=False), layer.BatchNorm2d(64),
                                  neuron.IFNode(surrogate_function=surrogate.ATan(), detach_reset=True))
        blocks, c_in = [], 64
        for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out)]
            c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = layer.Linear(512, classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean((3, 4)))


def resnet18():
    return _classify_images(SpikingResNet18(), steps=2, batch=2)


class SpikingSelfAttention(nn.Module):
    """Spikformer's SSA: LIF spikes for Q, K, V; attention = Q K^T V * scale without softmax."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, 0.125
        self.q, self.k, self.v = (nn.Sequential(layer.Linear(dim, dim), _lif()) for _ in range(3))
        self.attn_lif = neuron.LIFNode(tau=2.0, v_threshold=0.5, surrogate_function=surrogate.ATan())
        self.proj = nn.Sequential(layer.Linear(dim, dim), _lif())

    def forward(self, x):  # x: [T, B, N, D]
        t, b, n, d = x.shape
        h = self.heads

        def split(y):
            return y.reshape(t * b, n, h, d // h).transpose(1, 2).reshape(t * b * h, n, d // h)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        attention = torch.bmm(torch.bmm(q, k.transpose(1, 2)), v) * self.scale
        attention = attention.reshape(t, b, h, n, d // h).transpose(2, 3).reshape(t, b, n, d)
        return self.proj(self.attn_lif(attention))


class SpikformerBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attention = SpikingSelfAttention(dim, heads)
        self.mlp = nn.Sequential(layer.Linear(dim, 2 * dim), _lif(), layer.Linear(2 * dim, dim), _lif())

    def forward(self, x):
        x = x + self.attention(x)
        return x + self.mlp(x)


class Spikformer(nn.Module):
    def __init__(self, dim=64, heads=4, depth=2, classes=10):
        super().__init__()
        self.stem = nn.Sequential(  # spiking patch splitting: 32x32 -> 8x8 patches
            layer.Conv2d(3, dim // 2, 3, padding=1, bias=False), layer.BatchNorm2d(dim // 2), _lif(), layer.MaxPool2d(2),
            layer.Conv2d(dim // 2, dim, 3, padding=1, bias=False), layer.BatchNorm2d(dim), _lif(), layer.MaxPool2d(2),
        )
        self.blocks = nn.Sequential(*(SpikformerBlock(dim, heads) for _ in range(depth)))
        self.head = layer.Linear(dim, classes)

    def forward(self, x):  # [T, B, 3, 32, 32]
        x = self.stem(x).flatten(3).transpose(2, 3)  # [T, B, 64 patches, dim]
        return self.head(self.blocks(x).mean(2))


def spikformer():
    return _classify_images(Spikformer(), steps=4, batch=4)


def transformer():
    """A plain (non-spiking) 2-layer nn.TransformerEncoder, as a user's ANN baseline."""
    layer_ = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, dropout=0.0, batch_first=True)
    net = nn.Sequential(nn.TransformerEncoder(layer_, num_layers=2, enable_nested_tensor=False), nn.Linear(128, 10))
    x = torch.randn(16, 32, 128)
    target = torch.arange(16) % 10
    return net, x, target, lambda out, y: nn.functional.cross_entropy(out.mean(1), y)


WORKLOADS = {"mlp": mlp, "vgg": vgg, "sew": sew, "resnet18": resnet18, "spikformer": spikformer,
             "transformer": transformer}


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
