"""No silently uncosted neuron: a stateful module is costed by a model, or named with the reason
in that model's warnings (so in `spiketrace energy`'s JSON and its text's warnings).

Norse's LIFRecurrentCell is LIFCell's LIF with i += W_in x + W_rec z (norse/torch/functional/
lif.py lif_step): it is in analyze/neurons.py's table, with its last spikes z as kept state,
and its two products (F.linear inside the neuron) are costed wherever a model costs GEMMs.
A module the table does not know (a torch RNNCell, a Norse cell outside it) and, under
compat="spikingjelly", every snnTorch/Norse neuron, are named by every model.
"""

from __future__ import annotations

import json

import norse.torch as norse
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from spiketrace.analyze.cli import main
from spiketrace.capture import Recorder

MODELS = ("compute", "neuromc", "lemaire", "spikesim")
X = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])  # binary, batch 2


class Net(nn.Module):
    """fc -> a stateful cell; forward(x, state) returns (output, new state)."""

    def __init__(self, cell: nn.Module, features: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.cell = nn.Linear(3, features), cell

    def forward(self, x, state=None):
        return self.cell(self.fc(x), state) if state is not None else self.cell(self.fc(x))


def record(path, net, steps=2):
    """One stage per time step, the state each call returns handed to the next (none at first)."""
    state = None
    with Recorder(path, model=net) as recorder:
        for t in range(steps):
            with recorder.stage(f"step{t + 1}", phase="forward"), torch.no_grad():
                out, state = net(X, state)
    return path


def energy_json(trace, model, *extra):
    result = CliRunner().invoke(main, ["energy", str(trace), "--model", model, "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def named(document, text) -> bool:
    return any(text in warning for warning in document["warnings"])


@pytest.fixture(scope="module")
def recurrent_trace(tmp_path_factory):
    return record(tmp_path_factory.mktemp("lif_recurrent") / "trace", Net(norse.LIFRecurrentCell(4, 5)))


def test_lif_recurrent_cell_is_costed_or_named_by_every_model(recurrent_trace):
    # two steps of a (2, 5) output: i, v and the last spikes z, 4 bytes each per neuron and step
    compute = energy_json(recurrent_trace, "compute")
    assert compute["counts"]["neuron_state_read_bytes"] == compute["counts"]["neuron_state_write_bytes"] == 3 * 10 * 4 * 2
    assert named(compute, "Net.cell (LIFRecurrentCell) computes input and recurrent products")  # weights' reads
    neuromc = energy_json(recurrent_trace, "neuromc")
    # a soma per output and step, and the cell's two GEMMs (W_in x, W_rec z) as trace fragments
    assert neuromc["primitive_counts"]["by_op"]["soma.forward"]["mux"] == 2 * 10
    assert neuromc["energy_by_op"]["aten.mm.default"] > 0 and neuromc["uncosted"] == []
    assert named(neuromc, "Net.cell (LIFRecurrentCell) integrates 2 state variables")
    lemaire = energy_json(recurrent_trace, "lemaire")
    assert lemaire["energy_by_module"]["Net.cell"] > 0
    assert named(lemaire, "Net.cell (LIFRecurrentCell) computes input and recurrent products with its own "
                          "weights inside the neuron: they are not costed")
    spikesim = energy_json(recurrent_trace, "spikesim")
    assert named(spikesim, "Unsupported neuron modules found: cell (LIFRecurrentCell)")


@pytest.mark.parametrize("model", ("compute", "neuromc", "spikesim"))
def test_compat_names_the_neuron_it_does_not_see(recurrent_trace, model):
    """SpikingJelly sees no Norse neuron: compat reproduces its numbers and names the cell,
    not only the zeros/full that created its state."""
    document = energy_json(recurrent_trace, model, "--compat", "spikingjelly")
    assert named(document, "Net.cell (LIFRecurrentCell) keeps state from call to call (i, v, z) but is no "
                           f"neuron the {model} model costs under compat='spikingjelly'")


def test_compat_lemaire_names_it_once(recurrent_trace):
    document = energy_json(recurrent_trace, "lemaire", "--compat", "spikingjelly")
    assert document["warnings"] == ["Lemaire formulas do not support LIFRecurrentCell; its energy is omitted."]


class TorchCell(nn.Module):
    """A torch RNNCell used as a model's recurrent neuron layer: (h, h)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.RNNCell(4, 5)

    def forward(self, x, h=None):
        h = self.rnn(x, h)
        return h, h


OUTSIDE_THE_TABLE = {
    "torch RNNCell": (lambda: TorchCell(), "Net.cell.rnn (RNNCell) keeps state from call to call (hidden state h"),
    "Norse LIFAdExCell": (lambda: norse.LIFAdExCell(), "Net.cell (LIFAdExCell) keeps state from call to call"),
}


@pytest.mark.parametrize("case", list(OUTSIDE_THE_TABLE))
def test_stateful_module_outside_the_table_is_named_by_every_model(tmp_path, case):
    build, text = OUTSIDE_THE_TABLE[case]
    trace = record(tmp_path / "trace", Net(build()))
    for model in MODELS:
        document = energy_json(trace, model)
        if model == "lemaire":  # Lemaire's own refusal names every module it cannot cost
            assert named(document, "its energy is omitted"), document["warnings"]
        else:
            assert named(document, text), (model, document["warnings"])


def test_text_output_names_it(recurrent_trace):
    result = CliRunner().invoke(main, ["energy", str(recurrent_trace), "--model", "neuromc", "--compat", "spikingjelly"])
    assert result.exit_code == 0, result.output
    assert "warning: Net.cell (LIFRecurrentCell) keeps state from call to call" in result.stderr


def test_a_module_that_ran_only_outside_the_selection_is_not_named(tmp_path):
    """The warning is about the selected work: an RNNCell that ran only in stage "cell" is named
    for that stage (and step), not for stage "linear", in which only the Linear ran."""
    net = Net(TorchCell())
    with Recorder(tmp_path / "trace", model=net) as recorder:
        with recorder.stage("linear", phase="forward"), torch.no_grad():
            net.fc(X)
        recorder.step()
        with recorder.stage("cell", phase="forward"), torch.no_grad():
            net(X)
    text = "Net.cell.rnn (RNNCell) keeps state from call to call"
    for model in ("compute", "neuromc", "spikesim"):  # Lemaire's own refusal names the class, whatever ran
        assert not named(energy_json(tmp_path / "trace", model, "--stage", "linear"), text), model
        assert not named(energy_json(tmp_path / "trace", model, "--step", "0"), text), model
        assert named(energy_json(tmp_path / "trace", model, "--stage", "cell"), text), model
