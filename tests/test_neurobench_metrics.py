"""NeuroBench 2.3.0's six metrics from a trace (analyze/counters/neurobench_metrics.py) and the
`spiketrace neurobench` command.

The differential test runs NeuroBench's own Benchmark on each model of tests/neurobench_models.py
and the same run captured by the Recorder, and asserts every metric equal (integers exactly,
floats to 1e-9 relative). The hand-derived tests pin the rules where NeuroBench is absent.
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
from spiketrace.capture import record_inference
from tests.neurobench_models import CASES, capture, run_neurobench


def assert_same(ours, theirs, where: str = "") -> None:
    if isinstance(theirs, dict):
        assert set(ours) == set(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, int) and not isinstance(theirs, bool):
        assert ours == theirs, f"{where}: ours {ours}, NeuroBench {theirs}"
    else:
        assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=0.0) or ours == theirs, \
            f"{where}: ours {ours}, NeuroBench {theirs}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_metric_equals_neurobench(tmp_path, case):
    pytest.importorskip("neurobench")
    theirs, printed = run_neurobench(case)
    assert "Error" not in printed, printed  # a metric that raised would read 0.0
    capture(case, tmp_path / "t")
    ours = neurobench_metrics(tmp_path / "t", activation_modules=case.activation_modules, wrapper=case.wrapper)
    assert list(ours) == list(theirs)
    assert_same(dict(ours), theirs, case.name)
    # the batch is known everywhere, a SpikingJelly model's included (dim 1 of its modules' input)
    assert not [note for note in ours.notes if note.startswith("samples:")]


# A tiny model, every metric by hand:
#   Linear(3, 2), W = [[1, 0, 2], [0, 0, -1]], b = [-2, 4]; then ReLU. x (batch 2) = [[1, 2, 0], [0, 1, 3]]
TINY_WEIGHT = [[1.0, 0.0, 2.0], [0.0, 0.0, -1.0]]
TINY_X = [[1.0, 2.0, 0.0], [0.0, 1.0, 3.0]]


def tiny() -> nn.Module:
    net = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor(TINY_WEIGHT))
        net[0].bias.copy_(torch.tensor([-2.0, 4.0]))
    return net


def test_hand_derived_metrics_of_a_tiny_model(tmp_path):
    path = record_inference(tmp_path / "t", tiny(), torch.tensor(TINY_X))
    results = neurobench_metrics(path)
    # Footprint: 6 weights + 2 biases, float32: 8 * 4 = 32 bytes (no buffers); ParameterCount 8
    assert results["Footprint"] == 32 and results["ParameterCount"] == 8
    # ConnectionSparsity: zero weights 3 of 6 (the bias is not a connection): 0.5
    assert results["ConnectionSparsity"] == 0.5
    # SynapticOperations, 2 samples (dim 0 of x). x holds a 2 and a 3: not spikes, so MACs.
    # Pairs: sum_k nnz(x[:, k]) * nnz(W[:, k]) = 1 * 1 + 2 * 0 + 1 * 2 = 3 -> 1.5 per sample;
    # Dense: 2 rows * 3 inputs * 2 outputs = 12 -> 6.0 per sample
    assert results["SynapticOperations"] == {"Effective_MACs": 1.5, "Effective_ACs": 0.0, "Dense": 6.0}
    # ActivationSparsity: W x + b = [[1 - 2, 0 + 4], [6 - 2, -3 + 4]] = [[-1, 4], [4, 1]]; the
    # ReLU gives [[0, 4], [4, 1]]: 1 zero of 4 outputs
    assert results["ActivationSparsity"] == 0.25
    assert results["MembraneUpdates"] == 0.0  # no snnTorch neuron
    assert results.samples == 2 and results.activation_layers == ["Sequential.1"] and results.notes == []
    assert results.totals == {"MAC": 3, "AC": 0, "total_synops": 12, "total_samples": 2}
    # samples given: the per-sample metrics divide by it, the rest is unchanged
    given = neurobench_metrics(path, samples=3)
    assert given["SynapticOperations"] == {"Effective_MACs": 1.0, "Effective_ACs": 0.0, "Dense": 4.0}
    assert given["ActivationSparsity"] == 0.25


def test_activation_modules_and_wrapper(tmp_path):
    import snntorch as snn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), snn.Leaky(beta=0.5, init_hidden=True, threshold=0.1))
    path = record_inference(tmp_path / "t", net, torch.rand(2, 3))
    snntorch = neurobench_metrics(path)
    # SNNTorchModel: the Leaky is an activation layer; one call, every membrane element: 2 * 4 / 2
    assert snntorch.activation_layers == ["Sequential.1"] and snntorch["MembraneUpdates"] == 4.0
    torch_model = neurobench_metrics(path, wrapper="TorchModel")
    assert torch_model.activation_layers == [] and torch_model["ActivationSparsity"] == 0.0
    assert any("Leaky x1" in note for note in torch_model.notes)  # said, not silent
    assert neurobench_metrics(path, wrapper="TorchModel", activation_modules=["Leaky"]).activation_layers == [
        "Sequential.1"]
    with pytest.raises(ValueError, match="wrapper"):
        neurobench_metrics(path, wrapper="Torch")


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_gated_cells_count_gate_and_state_products(tmp_path, kind):
    torch.manual_seed(2)
    cell = nn.LSTMCell(4, 3) if kind == "lstm" else nn.GRUCell(4, 3)
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]])  # spikes: ACs
    h = torch.tensor([[0.5, 0.0, -1.5], [0.0, 0.0, 2.0]])  # nnz 3
    c = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # nnz 1
    state = (h, c) if kind == "lstm" else h
    # the two GEMMs (weights dense): nnz(x) * gate rows + nnz(h) * gate rows = (4 + 3) * 4H or 3H
    rows = (4 if kind == "lstm" else 3) * 3
    gemm = (4 + 3) * rows
    # gate terms, every gate nonzero (the biases have no zero), H = 3, B = 2:
    #   LSTMCell #(f & c) + #(i & g) + #(o & c') = nnz(c) + H * B + H * B = 1 + 12
    #   GRUCell  #(r & n_hh) + #((1 - z) & n) + #(z & h) = H * B + H * B + nnz(h) = 12 + 3
    extra = 1 + 12 if kind == "lstm" else 12 + 3
    with open_trace(_record_cell(tmp_path / "t", cell, x, state)) as trace:
        result = count(trace, convention="neurobench")
        assert {"mac": 0, **result.totals()} == {"synop": gemm + extra, "mac": 0}
        assert result.unsupported.empty
    neurobench = pytest.importorskip("neurobench.metrics.utils.layers")
    assert neurobench.single_layer_MACs((x, state), cell) == (gemm + extra, True)


def _record_cell(path, cell, x, state):
    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = cell

        def forward(self, x, *state):
            return self.cell(x, state if len(state) > 1 else state[0])

    return record_inference(path, Holder(), (x, *(state if isinstance(state, tuple) else (state,))))


def test_a_cell_without_state_is_said(tmp_path):
    torch.manual_seed(0)
    path = record_inference(tmp_path / "t", nn.Sequential(nn.LSTMCell(3, 2)), torch.ones(2, 3))
    results = neurobench_metrics(path)
    # W_ih x: 3 inputs * 8 rows * 2 samples = 48, gate terms 2 * H * B = 8: 56 MACs over 2 samples
    assert results["SynapticOperations"]["Effective_ACs"] == 56 / 2
    assert any("without a state" in note and "raises" in note for note in results.notes)


def _multi_step(tmp_path):
    from spikingjelly.activation_based import functional, layer, neuron

    torch.manual_seed(0)
    net = nn.Sequential(layer.Linear(4, 3), neuron.IFNode())
    functional.set_step_mode(net, "m")
    x = (torch.rand(5, 2, 4, generator=torch.Generator().manual_seed(0)) < 0.5).float()  # [T=5, B=2, 4]
    return record_inference(tmp_path / "t", net, x), x


def test_cli_json_samples_of_a_native_multi_step_run(tmp_path):
    path, x = _multi_step(tmp_path)
    runner = CliRunner()
    out = runner.invoke(main, ["neurobench", str(path), "--format", "json", "--activation-module", "BaseNode"])
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert list(document) == ["Footprint", "ConnectionSparsity", "ParameterCount", "SynapticOperations",
                              "ActivationSparsity", "MembraneUpdates"]
    assert list(document["SynapticOperations"]) == ["Effective_MACs", "Effective_ACs", "Dense"]
    # dim 0 of the model's input is T = 5; the batch, 2, is dim 1 of the multi-step modules' input
    assert "warning" not in out.stderr
    assert document["SynapticOperations"]["Effective_ACs"] == int(x.sum()) * 3 / 2
    given = runner.invoke(main, ["neurobench", str(path), "--format", "json", "--samples", "5"])
    assert given.exit_code == 0 and "warning" not in given.stderr
    assert json.loads(given.stdout)["SynapticOperations"]["Effective_ACs"] == int(x.sum()) * 3 / 5
    table = runner.invoke(main, ["neurobench", str(path), "--samples", "2"])
    assert "SynapticOperations: {'Effective_MACs': 0.0" in table.stdout and "samples: 2 (given)" in table.stdout


def test_counts_samples_option(tmp_path):
    path, x = _multi_step(tmp_path)
    runner = CliRunner()
    out = runner.invoke(main, ["counts", str(path), "--convention", "neurobench"])
    assert out.exit_code == 0 and "warning" not in out.stderr and "(2 samples)" in out.stdout
    given = runner.invoke(main, ["counts", str(path), "--convention", "neurobench", "--samples", "2", "--format", "json"])
    assert given.exit_code == 0 and "warning" not in given.stderr
    assert json.loads(given.stdout)["neurobench"] == {"Effective_MACs": 0.0, "Effective_ACs": int(x.sum()) * 3 / 2,
                                                      "samples": 2}
    refused = runner.invoke(main, ["counts", str(path), "--samples", "2"])
    assert refused.exit_code == 2 and "--convention neurobench" in refused.stderr
