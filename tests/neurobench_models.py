"""The models the NeuroBench differential test runs (tests/test_neurobench_metrics.py), and how
each is run: by NeuroBench 2.3.0's Benchmark, and captured by spiketrace's Recorder the same
way (the same NeuroBench model wrapper called on the same batches, one recorder step each).

Each case builds its network from a fixed seed twice, fresh, so that NeuroBench's static
metrics (measured before any batch) and the Recorder (bound before any batch) see the same
model. Sizes are tiny: the whole differential test runs in seconds.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

SAMPLES, BATCH = 5, 2  # batches of 2, 2, 1: ActivationSparsity weights each by its samples


@dataclass
class NeuroBenchCase:
    name: str
    build: Callable[[], nn.Module]
    data: Callable[[], torch.Tensor]  # every sample, batch-first
    wrapper: str = "TorchModel"  # the NeuroBench model class that runs it
    activation_modules: tuple[str, ...] = ()  # NeuroBench's add_activation_module, as class names
    options: dict = field(default_factory=dict)  # neurobench_metrics' other options


def _prune(weight: torch.Tensor, every: int) -> None:
    with torch.no_grad():
        weight.view(-1)[::every] = 0.0


class LeakyConv(nn.Module):
    """snnTorch: conv (a third of its weights zero) -> Leaky -> Linear (half zero) -> Leaky."""

    def __init__(self) -> None:
        super().__init__()
        import snntorch as snn

        self.conv = nn.Conv2d(1, 3, 3, padding=1, stride=2)
        self.lif1 = snn.Leaky(beta=0.9, threshold=0.2)
        self.fc = nn.Linear(3 * 3 * 3, 4)
        self.lif2 = snn.Leaky(beta=0.8, threshold=0.1)
        _prune(self.conv.weight, 3)
        _prune(self.fc.weight, 2)

    def forward(self, x):
        spikes, _ = self.lif1(self.conv(x))
        return self.lif2(self.fc(spikes.flatten(1)))


class LeakyConvNoBias(nn.Module):
    """snnTorch, the shape of issue 40's MembraneUpdates report: conv (4 x 16 x 16, no bias) ->
    Leaky -> Linear (1024 -> 10, no bias) -> Leaky. On sparse spikes a neuron whose input and
    membrane are both zero keeps its membrane, which NeuroBench does not count as an update."""

    def __init__(self) -> None:
        super().__init__()
        import snntorch as snn

        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)
        self.lif1 = snn.Leaky(beta=0.9, init_hidden=True)
        self.fc = nn.Linear(4 * 16 * 16, 10, bias=False)
        self.lif2 = snn.Leaky(beta=0.9, init_hidden=True, output=True)

    def forward(self, x):
        return self.lif2(self.fc(self.lif1(self.conv(x)).flatten(1)))


class SynapticRecurrent(nn.Module):
    """snnTorch: Linear -> Synaptic -> Linear -> RLeaky (its own recurrent Linear)."""

    def __init__(self) -> None:
        super().__init__()
        import snntorch as snn

        self.fc1 = nn.Linear(6, 5)
        self.syn = snn.Synaptic(alpha=0.7, beta=0.85, threshold=0.3)
        self.fc2 = nn.Linear(5, 4)
        self.rlif = snn.RLeaky(beta=0.9, linear_features=4, threshold=0.4)

    def forward(self, x):
        spikes, _, _ = self.syn(self.fc1(x))
        return self.rlif(self.fc2(spikes))


class NorseNet(nn.Module):
    """Norse: Linear -> LIFCell -> Linear -> LIFCell over a [B, T, F] input."""

    def __init__(self) -> None:
        super().__init__()
        import norse.torch as norse

        self.fc1 = nn.Linear(6, 5)
        self.lif1 = norse.LIFCell()
        self.fc2 = nn.Linear(5, 3)
        self.lif2 = norse.LIFCell()

    def forward(self, x):
        first = second = None
        outputs = []
        for t in range(x.shape[1]):
            z, first = self.lif1(3.0 * self.fc1(x[:, t]), first)
            z, second = self.lif2(3.0 * self.fc2(z), second)
            outputs.append(z)
        return torch.stack(outputs, 1)


class MultiStepConv(nn.Module):
    """SpikingJelly multi-step conv net behind a NeuroBench-style [B, T, ...] input, transposed
    to SpikingJelly's [T, B, ...] inside."""

    def __init__(self) -> None:
        super().__init__()
        from spikingjelly.activation_based import functional, layer, neuron

        self.net = nn.Sequential(layer.Conv2d(1, 2, 3, padding=1), neuron.LIFNode(tau=2.0, v_threshold=0.2), layer.Flatten(),
                                 layer.Linear(2 * 5 * 5, 3), neuron.IFNode(v_threshold=0.1))
        _prune(self.net[3].weight, 4)
        functional.set_step_mode(self.net, "m")
        self.reset = lambda: functional.reset_net(self.net)

    def forward(self, x):
        self.reset()
        return self.net(x.transpose(0, 1)).mean(0)


class ReluMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 2),
                                    nn.Sigmoid())
        _prune(self.layers[2].weight, 3)

    def forward(self, x):
        return self.layers(x)


class Cells(nn.Module):
    """An LSTMCell or GRUCell over a [B, T, F] input, state given from a zero start, then a Linear."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.cell = nn.LSTMCell(4, 3) if kind == "lstm" else nn.GRUCell(4, 3)
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        h = torch.zeros(x.shape[0], 3)
        state = (h, torch.zeros_like(h)) if self.kind == "lstm" else h
        for t in range(x.shape[1]):
            state = self.cell(x[:, t], state)
        return self.fc(state[0] if self.kind == "lstm" else state)


def _seeded(build: Callable[[], nn.Module], seed: int = 0) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(seed)
        return build()

    return make


def _data(*shape, spikes: bool = False, seed: int = 1, rate: float = 0.4) -> Callable[[], torch.Tensor]:
    def make() -> torch.Tensor:
        values = torch.rand(SAMPLES, *shape, generator=torch.Generator().manual_seed(seed))
        return (values < rate).float() if spikes else values

    return make


SPIKINGJELLY_NODE = "spikingjelly.activation_based.neuron.base_node.BaseNode"
CASES = [
    NeuroBenchCase("snntorch-leaky-conv", _seeded(LeakyConv), _data(3, 1, 6, 6), wrapper="SNNTorchModel"),
    NeuroBenchCase("snntorch-leaky-conv-no-bias", _seeded(LeakyConvNoBias), _data(3, 1, 16, 16, spikes=True, rate=0.25),
                   wrapper="SNNTorchModel"),
    NeuroBenchCase("snntorch-synaptic-rleaky", _seeded(SynapticRecurrent), _data(3, 6), wrapper="SNNTorchModel"),
    NeuroBenchCase("norse-lifcell", _seeded(NorseNet), _data(3, 6)),
    NeuroBenchCase("spikingjelly-multistep-conv", _seeded(MultiStepConv), _data(4, 1, 5, 5, spikes=True),
                   activation_modules=(SPIKINGJELLY_NODE,)),
    NeuroBenchCase("relu-mlp", _seeded(ReluMLP), _data(6)),
    NeuroBenchCase("lstmcell", _seeded(lambda: Cells("lstm")), _data(3, 4, spikes=True)),
    NeuroBenchCase("grucell", _seeded(lambda: Cells("gru")), _data(3, 4)),
]


def _wrap(case: NeuroBenchCase, net: nn.Module):
    from neurobench.models import SNNTorchModel, TorchModel

    model = SNNTorchModel(net) if case.wrapper == "SNNTorchModel" else TorchModel(net)
    for name in case.activation_modules:
        module, _, cls = name.rpartition(".")
        model.add_activation_module(getattr(__import__(module, fromlist=[cls]), cls))
    return model


def _loader(case: NeuroBenchCase):
    from torch.utils.data import DataLoader, TensorDataset

    data = case.data()
    return DataLoader(TensorDataset(data, torch.zeros(len(data))), batch_size=BATCH)


def run_neurobench(case: NeuroBenchCase) -> tuple[dict, str]:
    """(Benchmark.run's results, what it printed) over every metric of ours for `case`."""
    return benchmark_all(_wrap(case, case.build()), _loader(case))


def benchmark_all(model, loader) -> tuple[dict, str]:
    """(Benchmark.run's results, what it printed) of a NeuroBench model (TorchModel,
    SNNTorchModel) over `loader`, every metric of ours, quiet=False: a metric that raises turns
    into 0.0 with only a printed message, so the caller checks it."""
    from neurobench.benchmarks import Benchmark
    from neurobench.metrics.static import ConnectionSparsity, Footprint, ParameterCount
    from neurobench.metrics.workload import ActivationSparsity, MembraneUpdates, SynapticOperations

    benchmark = Benchmark(model, loader, [], [],
                          [[Footprint, ConnectionSparsity, ParameterCount],
                           [SynapticOperations, ActivationSparsity, MembraneUpdates]])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        results = benchmark.run(quiet=False)
    return results, printed.getvalue()


def capture(case: NeuroBenchCase, path) -> None:
    """Record the same run: a fresh copy of the net bound to the Recorder before any batch,
    the same wrapper called on each batch, one recorder step per batch."""
    from spiketrace.capture import Recorder

    net = case.build()
    model = _wrap(case, net)
    with Recorder(path, model=net) as recorder:
        for batch, _ in _loader(case):
            with torch.no_grad(), recorder.stage("forward", phase="forward"):
                model(batch)
            recorder.step()
