"""The samples NeuroBench's per-sample metrics divide by (analyze/counters/neurobench/batches.py).

NeuroBench counts `data[0].size(0)` per batch: dim 0 of batch-first [B, T, ...] data, which a
NeuroBench-style wrapper transposes to SpikingJelly's [T, B, ...] inside. A SpikingJelly model
called on [T, B, ...] itself (step_mode 'm') has T at dim 0 of its input; its batch is dim 1 of
the first multi-step module's input, which is also right behind the wrapper. The differential
test runs the same network both ways: NeuroBench 2.3.0, live, behind its wrapper on [B, T, ...]
data, and spiketrace on the native run of the same data transposed; every metric must agree.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import count, neurobench_metrics
from spiketrace.analyze.energy import paper
from spiketrace.capture import Recorder, record_inference
from tests.neurobench_models import benchmark_all

T, B = 4, 2  # the shape of the run issue 40 measured: Effective_ACs 4,282 (divided by T) where 8,564 is right
NODE = "spikingjelly.activation_based.neuron.base_node.BaseNode"


def multi_step_net() -> nn.Module:
    """A SpikingJelly conv net in multi-step mode: conv -> LIF -> flatten -> linear -> IF."""
    from spikingjelly.activation_based import functional, layer, neuron

    torch.manual_seed(0)
    net = nn.Sequential(layer.Conv2d(1, 4, 3, padding=1), neuron.LIFNode(tau=2.0, v_threshold=0.3), layer.Flatten(),
                        layer.Linear(4 * 6 * 6, 5), neuron.IFNode(v_threshold=0.2))
    functional.set_step_mode(net, "m")
    return net


class BatchFirst(nn.Module):
    """NeuroBench's convention: [B, T, ...] in, transposed to SpikingJelly's [T, B, ...] inside."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x):
        from spikingjelly.activation_based import functional

        functional.reset_net(self.net)
        return self.net(x.transpose(0, 1)).mean(0)


def spikes() -> torch.Tensor:
    """[T, B, 1, 6, 6] spikes, as SpikingJelly's own multi-step code takes them."""
    return (torch.rand(T, B, 1, 6, 6, generator=torch.Generator().manual_seed(3)) < 0.4).float()


def run_neurobench(x_batch_first: torch.Tensor) -> dict:
    from neurobench.models import TorchModel
    from spikingjelly.activation_based.neuron import BaseNode
    from torch.utils.data import DataLoader, TensorDataset

    model = TorchModel(BatchFirst(multi_step_net()))
    model.add_activation_module(BaseNode)
    loader = DataLoader(TensorDataset(x_batch_first, torch.zeros(len(x_batch_first))), batch_size=B)
    results, printed = benchmark_all(model, loader)
    assert "Error" not in printed, printed
    return results


def record_native(path, x):
    """The model called SpikingJelly's way, on [T, B, ...], one recorder step for the batch."""
    from spikingjelly.activation_based import functional

    net = multi_step_net()
    with Recorder(path, model=net) as recorder:
        with torch.no_grad(), recorder.stage("forward", phase="forward"):
            net(x)
        recorder.step()
        functional.reset_net(net)
    return path


def assert_close(ours, theirs, where=""):
    if isinstance(theirs, dict):
        for key in theirs:
            assert_close(ours[key], theirs[key], f"{where}.{key}")
    else:
        assert ours == theirs or math.isclose(ours, theirs, rel_tol=1e-9), f"{where}: ours {ours}, NeuroBench {theirs}"


def test_a_native_multi_step_run_divides_by_its_batch_as_neurobench_does_behind_its_wrapper(tmp_path):
    pytest.importorskip("neurobench")
    x = spikes()
    theirs = run_neurobench(x.transpose(0, 1).contiguous())
    path = record_native(tmp_path / "t", x)
    ours = neurobench_metrics(path, activation_modules=(NODE,))
    assert ours.samples == B  # dim 0 of the model's input is T = 4
    assert_close(dict(ours), theirs)
    assert not [note for note in ours.notes if note.startswith("samples:")]
    # by hand: every pair a spike meets is an AC (the first layer's input is spikes too), and the
    # per-sample value is the run's total over its B samples, not over its T steps
    assert ours["SynapticOperations"]["Effective_ACs"] == ours.totals["AC"] / B
    assert ours.totals["MAC"] == 0 and ours.totals["AC"] > 0
    with open_trace(path) as trace:
        result = count(trace, convention="neurobench")
        assert result.frame.attrs["samples"] == B and result.totals()["synop"] == ours.totals["AC"]


def test_the_paper_model_divides_by_the_same_samples(tmp_path):
    path = record_native(tmp_path / "t", spikes())
    with open_trace(path) as trace:
        activity = paper.activity(trace, mode="event")
    assert activity.samples == B and list(activity.batches["samples"]) == [B]
    assert activity.convention["samples_source"] == paper.SAMPLES_RULE


class Unrun(nn.Module):
    """A multi-step module the forward never calls: no module shows the batch, dim 0 is taken."""

    def __init__(self) -> None:
        super().__init__()
        from spikingjelly.activation_based import neuron

        self.fc = nn.Linear(4, 3)
        self.node = neuron.IFNode(step_mode="m")

    def forward(self, x):
        return self.fc(x)


def test_where_no_multi_step_module_shows_the_batch_dim_0_is_taken_and_said(tmp_path):
    x = (torch.rand(5, 2, 4, generator=torch.Generator().manual_seed(0)) < 0.5).float()
    path = record_inference(tmp_path / "t", Unrun(), x)
    with open_trace(path) as trace, pytest.warns(UserWarning, match=r"took dim 0 of the model's input.*--samples N"):
        result = count(trace, convention="neurobench")
    assert result.frame.attrs["samples"] == 5
    out = CliRunner().invoke(main, ["counts", str(path), "--convention", "neurobench", "--format", "json"])
    assert out.exit_code == 0 and "warning: samples: took dim 0" in out.stderr
    assert json.loads(out.stdout)["neurobench"]["samples"] == 5
