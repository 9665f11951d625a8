"""The NeuroBench convention of the synop and mac counters (analyze/counters/neurobench.py).

NeuroBench's SynapticOperations binarises a layer call's input and the layer's weights
(nonzero -> 1), zeroes the bias, reruns the layer and sums its output: the pairs of a nonzero
input and a nonzero weight that meet inside the output. A call whose input values are all in
{-1, 0, 1} counts them as ACs (Effective_ACs, our synop), any other as MACs (Effective_MACs,
our mac); both are divided by the samples. Each case's number is derived by hand below, and
checked against that definition run on the layer itself (`neurobench_pairs`).
"""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import count, counts, neurobench
from spiketrace.analyze.counters.neurobench import MissingStatisticsError
from spiketrace.capture import Recorder, record_inference
from spiketrace.schemas import layout
from tests.trace_surgery import rewrite_part


def neurobench_pairs(layer: nn.Module, x: torch.Tensor) -> int:
    """NeuroBench's definition of a stateless layer call's operations: the layer with its
    weights binarised and no bias, run on the binarised input, summed."""
    binary = copy.deepcopy(layer)
    with torch.no_grad():
        binary.weight.copy_((binary.weight != 0).float())
        if binary.bias is not None:
            binary.bias.zero_()
        return int(binary((x != 0).float()).sum())


def totals(trace, **options) -> dict[str, int]:
    result = count(trace, convention="neurobench", **options)
    return {"synop": 0, "mac": 0, **result.totals()}


# Linear(4, 3) with zero weights. Nonzero weights per input column k (w[:, k] != 0):
#   column 0: rows 0 and 2 -> 2; column 1: row 2 -> 1; column 2: row 0 -> 1; column 3: row 2 -> 1
LINEAR_WEIGHT = torch.tensor([[1.5, 0.0, -2.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, 1.0, 0.0, 3.0]])


def linear() -> nn.Linear:
    layer = nn.Linear(4, 3)
    with torch.no_grad():
        layer.weight.copy_(LINEAR_WEIGHT)
    return layer


def test_linear_with_zero_weights_and_minus_one_events(tmp_path):
    layer = linear()
    # -1/0/1 events, batch 2: nonzero inputs per column k: [1, 2, 0, 1]
    x = torch.tensor([[1.0, -1.0, 0.0, 0.0], [0.0, 1.0, 0.0, -1.0]])
    # pairs = sum_k nnz(x[:, k]) * nnz(w[:, k]) = 1*2 + 2*1 + 0*1 + 1*1 = 5; the bias is no
    # synaptic operation; values in {-1, 0, 1}: 5 ACs, 0 MACs, 2.5 per sample
    assert neurobench_pairs(layer, x) == 5
    with open_trace(record_inference(tmp_path / "t", nn.Sequential(layer), x)) as trace:
        assert totals(trace) == {"synop": 5, "mac": 0}
        result = count(trace, convention="neurobench")
        assert neurobench.per_sample(result, result.frame.attrs["samples"]) == {
            "Effective_MACs": 0.0, "Effective_ACs": 2.5, "samples": 2}
        assert result.spikingjelly("synop") == {"Global": {"aten.addmm.default": 5},
                                                "Sequential": {"aten.addmm.default": 5},
                                                "Sequential.0": {"aten.addmm.default": 5}}


@pytest.mark.parametrize("level", ["synaptic", "none"])
def test_any_value_statistics_level_serves_it(tmp_path, level):
    # the op statistics decide (x_ternary holds for 0/1 inputs too): no tensor statistic needed
    x = torch.tensor([[1.0, -1.0, 0.0, 0.0], [0.0, 1.0, 0.0, -1.0]])
    with open_trace(record_inference(tmp_path / "t", nn.Sequential(linear()), x, value_statistics=level)) as trace:
        assert totals(trace) == {"synop": 5, "mac": 0}


def test_linear_with_analog_input_counts_macs(tmp_path):
    layer = linear()
    # analog, batch 2: nonzero inputs per column [1, 0, 1, 1] -> 1*2 + 0*1 + 1*1 + 1*1 = 4 MACs
    x = torch.tensor([[0.5, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 1.5]])
    assert neurobench_pairs(layer, x) == 4
    with open_trace(record_inference(tmp_path / "t", nn.Sequential(layer), x)) as trace:
        assert totals(trace) == {"synop": 0, "mac": 4}


def test_linear_without_bias_and_three_dim_input(tmp_path):
    layer = nn.Linear(4, 3, bias=False)  # a 3-D input: view, mm, view
    with torch.no_grad():
        layer.weight.copy_(LINEAR_WEIGHT)
    x = torch.zeros(2, 2, 4)
    x[0, 0, 0] = x[1, 1, 1] = x[1, 0, 3] = 1.0
    # nonzero inputs per column over the 4 rows: [1, 1, 0, 1] -> 1*2 + 1*1 + 1*1 = 4 ACs
    assert neurobench_pairs(layer, x) == 4
    with open_trace(record_inference(tmp_path / "t", nn.Sequential(layer), x)) as trace:
        assert totals(trace) == {"synop": 4, "mac": 0}


# Conv2d(1 -> 2, 3x3, stride 2, padding 1) on a 4x4 input: 2x2 outputs. Along one dim, output
# o with tap k reads input i = 2o + k - 1, so input row i is read by the (o, k) pairs
#   i=0: (0,1); i=1: (0,2), (1,0); i=2: (1,1); i=3: (1,2)   (tap (0,0) lands in the padding)
# Kernel of output channel 0: nonzero everywhere but its centre (1,1); of channel 1: only (0,0).
def conv() -> nn.Conv2d:
    layer = nn.Conv2d(1, 2, 3, stride=2, padding=1)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(2, 1, 3, 3).abs() + 0.5)
        layer.weight[0, 0, 1, 1] = 0.0
        layer.weight[1] = 0.0
        layer.weight[1, 0, 0, 0] = -1.0
    return layer


def _conv_input(values) -> torch.Tensor:
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 0, 0], x[0, 0, 1, 1], x[0, 0, 3, 3] = values
    return x


@pytest.mark.parametrize("values, counter", [((1.0, -1.0, 1.0), "synop"), ((0.5, 2.0, -3.0), "mac")],
                         ids=["events", "analog"])
def test_conv_with_stride_padding_and_zero_weights(tmp_path, values, counter):
    layer, x = conv(), _conv_input(values)
    # input (0,0): only tap (1,1) reads it, zero in both kernels -> 0 pairs
    # input (1,1): taps {2,0} x {2,0} = (2,2), (2,0), (0,2), (0,0): 4 in channel 0, 1 in channel 1 -> 5
    # input (3,3): only tap (2,2): channel 0 -> 1
    # 6 pairs: ACs for the {-1, 0, 1} input, MACs for the analog one
    assert neurobench_pairs(layer, x) == 6
    with open_trace(record_inference(tmp_path / "t", nn.Sequential(layer), x)) as trace:
        assert totals(trace) == {"synop": 0, "mac": 0, counter: 6}


def test_grouped_and_sparse_conv1d_equals_the_definition(tmp_path):
    torch.manual_seed(3)
    layer = nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2)
    with torch.no_grad():
        layer.weight.mul_((torch.rand_like(layer.weight) < 0.5).float())  # about half the weights zero
    x = (torch.rand(3, 4, 11) < 0.3).float() * torch.tensor([1.0, -1.0]).repeat(22)[:11]
    expected = neurobench_pairs(layer, x)
    assert expected > 0
    with open_trace(record_inference(tmp_path / "t", nn.Sequential(layer), x)) as trace:
        assert totals(trace) == {"synop": expected, "mac": 0}


class SpikingNet(nn.Module):
    """An analog first layer (MACs), then spikes (ACs) into a conv and a Linear, dense weights."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encode = nn.Conv2d(2, 3, 3, padding=1)
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, image):
        spikes = (self.encode(image) > 0).float()
        spikes = (self.conv(spikes) > 0).float()
        return self.fc(spikes.flatten(1))


def test_dense_weights_and_binary_inputs_equal_synop_per_sample(tmp_path):
    image = torch.rand(4, 2, 5, 5) + 0.1  # no zero: encode's pairs are all its taps
    with open_trace(record_inference(tmp_path / "t", SpikingNet(), image)) as trace:
        ours = count(trace, ["synop", "mac"]).totals()
        result = count(trace, convention="neurobench")
    got = neurobench.per_sample(result, result.frame.attrs["samples"])
    # the binary layers: each spike meets every weight it reaches, SpikingJelly's synops
    assert result.frame.attrs["samples"] == 4
    assert got["Effective_ACs"] == ours["synop"] / 4
    # the analog first layer (no zero input, dense weight): every (input, weight) pair that
    # meets inside the 5x5 output. Per dim (kernel 3, padding 1) the 5 positions are read
    # [2, 3, 3, 3, 2] times, 13 in all, so 13 * 13 = 169 per (C_in, C_out) pair: 2 * 3 * 169
    # MACs per sample. SpikingJelly's MACs also count the taps in the zero padding: 2 * 9 * 3 * 25.
    assert got["Effective_MACs"] == 2 * 3 * 169
    assert ours["mac"] / 4 == 2 * 9 * 3 * 25  # conv and fc take spikes: no MACs


class DenseOperands(nn.Module):
    """Three GEMMs whose pair counts the capture reads off an operand it knows is dense: a
    dense weight on spikes (y dense), an analog input with no zero on a sparse weight (x
    dense), and a bmm of a dense activation with spikes."""

    def __init__(self) -> None:
        super().__init__()
        self.spiking = nn.Linear(4, 3, bias=False)  # addmm-free: mm(x, w.t())
        self.analog = nn.Linear(4, 3)  # addmm(bias, x, w.t())
        with torch.no_grad():
            self.spiking.weight.copy_(torch.tensor([[0.5, 1.0, -2.0, 3.0], [1.5, 0.25, 1.0, -1.0],
                                                    [2.0, 0.5, 0.75, 1.25]]))  # no zero
            self.analog.weight.copy_(LINEAR_WEIGHT)  # zeros: nonzeros per column k [2, 1, 1, 1]

    def forward(self, spikes, analog, keys):
        return self.spiking(spikes).sum() + self.analog(analog).sum() + torch.bmm(analog.unsqueeze(0), keys).sum()


@pytest.mark.parametrize("level", ["full", "none"])
def test_a_dense_operand_gives_the_pair_count_the_pass_gives(tmp_path, level):
    # At "full" the record's nnz says which operand is dense and the count is read off it;
    # at "none" there is no nnz and the pass counts. Both must be NeuroBench's definition.
    net = DenseOperands()
    spikes = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])  # nnz 3
    analog = torch.tensor([[0.5, 1.5, 2.0, 0.25], [1.0, 3.0, 0.5, 0.75]])  # no zero, 2 x 4
    keys = torch.zeros(1, 4, 5)
    keys[0, 0, 1] = keys[0, 2, 4] = keys[0, 3, 0] = 1.0  # nnz 3 (row 1 empty)
    # spiking: y = w.t() [4, 3] dense, so every input spike meets its 3 outputs: 3 * 3 = 9
    assert neurobench_pairs(net.spiking, spikes) == 9
    # analog: x [2, 4] dense, so every weight nonzero meets both rows: 2 * nnz(w) = 2 * 5 = 10
    assert neurobench_pairs(net.analog, analog) == 10
    # bmm: x [1, 2, 4] dense, y [1, 4, 5] with 3 nonzeros: M * nnz(y) = 2 * 3 = 6
    with open_trace(record_inference(tmp_path / "t", net, (spikes, analog, keys), value_statistics=level)) as trace:
        pairs = trace.sql("SELECT e.op, s.value FROM op_stats s JOIN events e USING (seq) "
                          "WHERE s.stat LIKE '%nonzero_pairs' ORDER BY seq")
    assert list(pairs.itertuples(index=False, name=None)) == [("aten.mm.default", 9.0), ("aten.addmm.default", 10.0),
                                                              ("aten.bmm.default", 6.0)]


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.cell = nn.RNNCell(3, 4)

    def forward(self, x, h):
        return self.cell(x, h)


def test_rnn_cell_is_spiking_by_its_input_x(tmp_path):
    model = Recurrent()
    with torch.no_grad():
        model.cell.weight_ih[:, 1] = 0.0  # input column 1 meets no weight
    x = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, -1.0]])  # events
    h = torch.tensor([[0.5, -0.2, 0.0, 0.3], [0.1, 0.0, 0.0, 0.0]])  # analog hidden state
    # W_ih x: nonzero inputs per column [1, 1, 1], nonzero weights per column [4, 0, 4] -> 8
    # W_hh h: nonzero h per column [2, 1, 0, 1], W_hh dense (4 per column) -> 16
    # NeuroBench classifies the call by x alone ({-1, 0, 1}): 24 ACs, though h is analog
    with open_trace(record_inference(tmp_path / "t", model, (x, h))) as trace:
        assert totals(trace) == {"synop": 24, "mac": 0}


def test_gated_cells_add_the_gate_and_state_products(tmp_path):
    model = nn.Sequential(nn.LSTMCell(3, 2))
    with open_trace(record_inference(tmp_path / "t", model, torch.ones(1, 3))) as trace:
        result = count(trace, convention="neurobench")
        # the gate GEMMs: 3 inputs * 8 gate rows (h starts at zero: no W_hh pairs), then
        # NeuroBench's gate and state products (tests/test_neurobench_metrics.py): with nonzero
        # biases every gate is nonzero, c = 0: #(f & c) 0 + #(i & g) 2 + #(o & c') 2 = 2 * H * B
        assert result.totals()["synop"] == 3 * 8 + 2 * 2 * 1
        assert result.unsupported.empty
        assert any("without a state" in note for note in result.frame.attrs["notes"])


def test_only_layers_count_and_backward_does_not(tmp_path):
    net = nn.Sequential(nn.Linear(3, 2))
    x = torch.tensor([[1.0, 0.0, 1.0]])
    with Recorder(tmp_path / "t", model=net) as recorder:
        with recorder.stage("forward"):
            loss = net(x).sum() + (x @ torch.ones(3, 3)).sum()  # a functional matmul: no layer
        with recorder.stage("backward"):
            loss.backward()
    with open_trace(tmp_path / "t") as trace:
        assert totals(trace) == {"synop": 2 * 2, "mac": 0}  # 2 spikes * 2 outputs, forward only


def test_multi_step_samples_are_dim_1_of_the_multi_step_modules_input(tmp_path):
    from spikingjelly.activation_based import functional, layer, neuron

    net = nn.Sequential(layer.Linear(4, 3), neuron.IFNode())
    functional.set_step_mode(net, "m")
    x = (torch.rand(5, 2, 4, generator=torch.Generator().manual_seed(0)) < 0.5).float()  # T=5, B=2
    with open_trace(record_inference(tmp_path / "t", net, x)) as trace, warnings.catch_warnings():
        warnings.simplefilter("error")  # the batch is known: nothing to warn of
        # called on [T, B, ...] as SpikingJelly runs it: the batch is dim 1 of the first
        # multi-step module's input (dim 0 of the model's is T)
        result = count(trace, convention="neurobench")
        assert result.frame.attrs["samples"] == 2
        assert neurobench.per_sample(result, 2)["Effective_ACs"] == int(x.sum()) * 3 / 2
        assert result.totals()["synop"] == int(x.sum()) * 3


def test_options_and_refusals(tmp_path):
    x = torch.tensor([[1.0, 0.0, 1.0]])
    with open_trace(record_inference(tmp_path / "t", nn.Sequential(nn.Linear(3, 2)), x)) as trace:
        with pytest.raises(ValueError, match="synop .* and mac .* only"):
            count(trace, ["flop"], convention="neurobench")
        with pytest.raises(ValueError, match="exclusive"):
            count(trace, convention="neurobench", compat="spikingjelly")
        with pytest.raises(ValueError, match="convention must be"):
            count(trace, convention="nb")
        assert totals(trace, ignore_modules=["Linear"]) == {"synop": 0, "mac": 0}
        frame = counts(trace, "synop", convention="neurobench", by=("stage",))
        assert frame.attrs["samples"] == 1 and set(frame["stage"]) == {"forward"}


def test_a_trace_without_the_statistics_names_what_it_lacks(tmp_path):
    path = record_inference(tmp_path / "t", nn.Sequential(nn.Linear(3, 2)), torch.tensor([[1.0, 0.0, 1.0]]))
    # as a capture before schema 1.3 wrote it: no NeuroBench statistics
    for part in sorted((path / "op_stats").rglob("*.parquet")):
        rewrite_part(part, lambda table: table.filter(
            pa_compute_not_in(table, ["addmm_nonzero_pairs", "addmm_x_ternary", "mm_nonzero_pairs", "x_ternary"])))
    manifest_file = layout.manifest_path(path, 0)
    manifest = json.loads(manifest_file.read_text())
    manifest["schema_version"] = "1.2"
    manifest_file.write_text(json.dumps(manifest))
    with open_trace(path) as trace:
        with pytest.raises(MissingStatisticsError, match=r"addmm_nonzero_pairs of 1 aten\.addmm\.default.*schema 1\.2"):
            count(trace, convention="neurobench")
        assert count(trace, ["synop"]).totals()["synop"] == 2 * 2  # the other counters are unaffected


def pa_compute_not_in(table, names):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.invert(pc.is_in(table.column("stat").cast(pa.string()), value_set=pa.array(names)))


def test_cli_convention(tmp_path):
    path = record_inference(tmp_path / "t", nn.Sequential(linear()), torch.tensor([[1.0, -1.0, 0.0, 0.0],
                                                                                  [0.0, 1.0, 0.0, -1.0]]))
    out = CliRunner().invoke(main, ["counts", str(path), "--convention", "neurobench"])
    assert out.exit_code == 0, out.output
    assert "Effective_ACs 2.5" in out.output and "2 samples" in out.output
    out = CliRunner().invoke(main, ["counts", str(path), "--convention", "neurobench", "--format", "json"])
    assert json.loads(out.stdout)["neurobench"] == {"Effective_MACs": 0.0, "Effective_ACs": 2.5, "samples": 2}
