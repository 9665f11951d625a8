"""The model zoo every differential and round-trip test runs over, in one place.

Each case builds a small network, an input and a target from a fixed seed. Sizes are tiny
so the whole suite stays fast on two cores; geometry (stride, padding, dilation, groups,
transposition, multi-step neurons, binary bmm) is what the cases exist to cover.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from spikingjelly.activation_based import functional, layer, neuron, surrogate
from torch import nn


@dataclass
class Case:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], torch.Tensor]
    target: Callable[[torch.Tensor], torch.Tensor]
    loss_fn: Callable = nn.functional.mse_loss


def spikes(*shape, p=0.3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=generator) < p).float()


def dense(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _like(out):
    return torch.zeros_like(out)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 10)
        self.sn1 = neuron.IFNode()
        self.fc2 = nn.Linear(10, 4, bias=False)
        self.sn2 = neuron.LIFNode(tau=2.0)

    def forward(self, x):
        return self.sn2(self.fc2(self.sn1(self.fc1(x))))


class ConvGeometry(nn.Module):
    """Stride, padding, dilation, grouped and depthwise convs, BN, pooling."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.sn1 = neuron.IFNode()
        self.conv2 = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2, bias=False)
        self.sn2 = neuron.LIFNode()
        self.depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.sn3 = neuron.IFNode()
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(2)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.sn1(self.bn1(self.conv1(x)))
        x = self.sn2(self.conv2(x))
        x = self.pool(self.sn3(self.depthwise(x)))
        return self.fc(self.avg(x).flatten(1))


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm1d(4)
        self.sn = neuron.IFNode()
        self.up = nn.ConvTranspose1d(4, 2, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return self.up(self.sn(self.bn(self.conv(x))))


class MultiStep(nn.Module):
    """step_mode='m' net: layer.* wrappers with LIF, IF and PLIF neurons over T steps."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(1, 3, 3, padding=1, bias=False)
        self.bn = layer.BatchNorm2d(3)
        self.lif = neuron.LIFNode(tau=2.0, surrogate_function=surrogate.ATan(), detach_reset=True)
        self.flat = layer.Flatten()
        self.fc = layer.Linear(3 * 4 * 4, 5)
        self.if_node = neuron.IFNode(surrogate_function=surrogate.Sigmoid())
        self.fc2 = layer.Linear(5, 2)
        self.plif = neuron.ParametricLIFNode()
        functional.set_step_mode(self, "m")

    def forward(self, x):
        x = self.lif(self.bn(self.conv(x)))
        x = self.if_node(self.fc(self.flat(x)))
        return self.plif(self.fc2(x)).mean(0)


class SEWBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.sn1 = neuron.IFNode(detach_reset=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.sn2 = neuron.IFNode(detach_reset=True)

    def forward(self, x):
        out = self.sn2(self.bn2(self.conv2(self.sn1(self.bn1(self.conv1(x))))))
        return out + x  # SEW ADD connect


class SEWNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.sn = neuron.IFNode()
        self.block = SEWBlock(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.block(self.sn(self.bn(self.stem(x))))
        return self.fc(x.mean((2, 3)))


class SpikingAttention(nn.Module):
    """Spiking self-attention: binary Q, K, V from neurons, binary x binary bmm."""

    def __init__(self, dim=8, tokens=5):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.q_sn, self.k_sn, self.v_sn = neuron.IFNode(), neuron.IFNode(), neuron.IFNode()
        self.attn_sn = neuron.IFNode(v_threshold=0.5)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        q, k, v = self.q_sn(self.q(x)), self.k_sn(self.k(x)), self.v_sn(self.v(x))
        scores = torch.bmm(q, k.transpose(1, 2)) * 0.25
        out = torch.bmm(scores, v)
        return self.proj(self.attn_sn(out))


class DenseFirst(nn.Module):
    """A dense (non-binary) input into the first layer, then spiking."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.sn = neuron.LIFNode()
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(self.sn(self.fc1(x)))


CASES = [
    Case("mlp", MLP, lambda: spikes(4, 12), _like),
    Case("conv_geometry", ConvGeometry, lambda: spikes(2, 2, 9, 9), _like),
    Case("conv1d_transposed", Conv1dNet, lambda: spikes(2, 3, 8), _like),
    Case("multistep", MultiStep, lambda: spikes(3, 2, 1, 4, 4), _like),
    Case("sew", SEWNet, lambda: spikes(2, 2, 6, 6), _like),
    Case("attention", SpikingAttention, lambda: dense(2, 5, 8) + 0.8, _like),
    Case("dense_first", DenseFirst, lambda: dense(3, 6), _like),
]
CASE_IDS = [case.name for case in CASES]

OPTIMIZERS = {
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4),
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3),
}


def build(case: Case, seed: int = 0):
    torch.manual_seed(seed)
    model = case.build()
    x = case.inputs()
    return model, x


def reset(model: nn.Module) -> None:
    functional.reset_net(model)


def run_steps(recorder, model, x, case: Case, optimizer=None, optimizer_stage: str = "optimizer") -> None:
    """The recorded scenario the differential tests share: one forward-only step under
    no_grad, or, with an optimizer, two full training steps (the second starts from the
    first one's optimizer state), each labelled with stages and closed by recorder.step().
    recorder=None runs the same scenario unrecorded (for reference runs)."""
    if recorder is None:
        recorder = _Unrecorded()
    for _ in range(2 if optimizer else 1):
        with recorder.stage("forward"):
            if optimizer:
                out = model(x)
            else:
                with torch.no_grad():
                    out = model(x)
        if optimizer:
            loss = case.loss_fn(out, case.target(out))
            with recorder.stage("backward"):
                loss.backward()
            with recorder.stage(optimizer_stage):
                optimizer.step()
                optimizer.zero_grad()
        reset(model)
        recorder.step()


class _Unrecorded:
    """Recorder's stage()/step() surface, doing nothing."""

    def stage(self, name, **options):
        return contextlib.nullcontext()

    def step(self) -> None:
        pass
