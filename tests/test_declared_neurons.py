"""A hand-written neuron declares what it is (spiketrace.capture.LIFNeuron / IFNeuron) and every
model that costs neurons costs it: the built-in example's LIF, which NeuroMC once left
uncosted ("keeps state from call to call (v) but is no neuron the neuromc model costs", and its
surrogate gradient's aten.neg without a rule), is costed completely."""

from __future__ import annotations

import torch
from torch import nn

from spiketrace.analyze import Analysis, neurons
from spiketrace.capture import IFNeuron, LIFNeuron, Recorder
from spiketrace.capture.session.example import LIF, record_demo


class HandIF(IFNeuron, nn.Module):
    """An IF neuron written by hand, one step per call, reset by subtracting the threshold."""

    def __init__(self) -> None:
        super().__init__()
        self.v_threshold, self.v_reset = 1.0, None
        self._memories = {"v": 0.0}

    def forward(self, x):
        v = self._memories["v"] + x
        spike = (v >= self.v_threshold).to(x.dtype)
        self._memories["v"] = v - spike * self.v_threshold
        return spike


def test_a_declared_neuron_runs_as_it_did():
    """The classes add no behaviour: the example LIF computes what the undeclared one does."""
    class Plain(nn.Module):
        forward = LIF.forward

        def __init__(self):
            super().__init__()
            self.tau, self.v_threshold, self._memories = 2.0, 0.5, {"v": 0.0}

    x = torch.rand(4, 3, 5)
    assert issubclass(LIF, LIFNeuron) and issubclass(LIFNeuron, IFNeuron)
    assert torch.equal(LIF()(x), Plain()(x))
    assert set(vars(LIF())) - set(vars(Plain())) == {"v_reset", "step_mode"}


def test_the_neuron_table_reads_the_declared_attributes(tmp_path):
    with Recorder(tmp_path / "t", model=nn.Sequential(LIF(tau=4.0, v_threshold=0.25), HandIF())) as rec, \
            rec.stage("forward"):
        rec.model[1](rec.model[0](torch.rand(3, 2, 5)))
    with Analysis(tmp_path / "t") as analysis:
        table = neurons.describe(analysis.trace, "neuromc").set_index("path")
    lif, hand_if = table.loc["Sequential.0"], table.loc["Sequential.1"]
    # LIF: tau 4 keeps 1 - 1/4 of v per step, one multiply; a reset to 0.0 is a reset to a value
    assert (lif.kind, lif.decay, lif.threshold, lif.reset, bool(lif.multi_step), lif.leak_multiplies) == \
        ("LIF", 0.75, 0.25, "value", True, 1)
    # IF: no leak; v_reset None subtracts the threshold; no step_mode: one step per call
    assert (hand_if.kind, hand_if.decay, hand_if.threshold, hand_if.reset, bool(hand_if.multi_step),
            hand_if.leak_multiplies) == ("IF", 1.0, 1.0, "subtract", False, 0)
    # SpikingJelly itself recognises no such neuron: neither does its compat mode
    with Analysis(tmp_path / "t") as analysis:
        assert neurons.describe(analysis.trace, "neuromc", "spikingjelly").empty


def test_the_example_is_costed_completely_by_neuromc(tmp_path):
    with Analysis(record_demo(tmp_path / "demo")) as analysis:
        report = analysis.energy("neuromc")
    assert not [w for w in report.warnings if "keeps state" in w], report.warnings
    assert report.uncosted.empty, report.uncosted
    # the neurons' soma updates are costed now: each LIF module has energy of its own
    assert report.energy_by_module.get("SpikingMLP.sn1", 0) > 0 and report.energy_by_module.get("SpikingMLP.sn2", 0) > 0
