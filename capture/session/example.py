"""The built-in example: a small multi-step spiking MLP in plain torch, and `record_demo`.

The network needs no SNN library: a leaky integrate-and-fire neuron with a surrogate
gradient, stepping over T time steps, between two Linear layers. Its memories live in a
`_memories` dict, as SpikingJelly's MemoryModule keeps them, so neuron snapshots appear in
the trace too.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from spiketrace.capture.modules.declared import LIFNeuron
from spiketrace.capture.session.scenarios import record_training_step


class SpikeFunction(torch.autograd.Function):
    """Heaviside forward, sigmoid-derivative surrogate backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        sigmoid = torch.sigmoid(4.0 * x)
        return grad_output * 4.0 * sigmoid * (1 - sigmoid)


class LIF(LIFNeuron, nn.Module):
    """Multi-step LIF neuron over inputs shaped [T, N, ...], hard reset to 0; declared a LIF
    neuron (LIFNeuron), so every model that costs neurons costs its state update."""

    def __init__(self, tau: float = 2.0, v_threshold: float = 0.5) -> None:
        super().__init__()
        self.tau = tau
        self.v_threshold = v_threshold
        self.v_reset = 0.0
        self.step_mode = "m"
        self._memories = {"v": 0.0}

    def forward(self, x_seq: torch.Tensor) -> torch.Tensor:
        v = self._memories["v"]
        spikes = []
        for x in x_seq:
            v = v + (x - v) / self.tau
            spike = SpikeFunction.apply(v - self.v_threshold)
            v = v * (1.0 - spike)
            self._memories["v"] = v
            spikes.append(spike)
        return torch.stack(spikes)

    def reset(self) -> None:
        self._memories["v"] = 0.0


class SpikingMLP(nn.Module):
    def __init__(self, n_in: int = 64, n_hidden: int = 32, n_out: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_in, n_hidden)
        self.sn1 = LIF()
        self.fc2 = nn.Linear(n_hidden, n_out)
        self.sn2 = LIF()
        with torch.no_grad():  # the default init leaves a net this small nearly silent
            self.fc1.weight.mul_(4.0)
            self.fc2.weight.mul_(4.0)

    def forward(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.sn2(self.fc2(self.sn1(self.fc1(x_seq)))).mean(0)


def example_batch(steps: int = 4, batch: int = 8, n_in: int = 64, n_out: int = 10, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    spikes = (torch.rand(steps, batch, n_in, generator=generator) < 0.3).float()
    target = torch.nn.functional.one_hot(torch.arange(batch) % n_out, n_out).float()
    return spikes, target


def record_demo(out, **settings) -> Path:
    """Capture one SGD training step of the example network into `out`."""
    torch.manual_seed(0)
    model = SpikingMLP()
    inputs, target = example_batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    record_training_step(
        out, model, inputs, target=target, loss_fn=nn.functional.mse_loss, optimizer=optimizer, **settings
    )
    return Path(out)
