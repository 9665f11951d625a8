"""MembraneUpdates (analyze/counters/neurobench/activation.py): NeuroBench 2.3.0 counts, after a
batch's first call, the membrane elements that changed, count_nonzero(mem before - mem after).

snnTorch's Leaky integrates `beta * mem + input` in one add; with 0 < beta < 1 and a positive
threshold an element changes exactly when its membrane or its input is nonzero, so the changed
elements are that add's nonzeros, which the trace holds. Synaptic, RLeaky, RSynaptic and
Lapicque sum their decayed membrane and input (synaptic current, recurrence) at the end of a
chain of ops from the input, whose last op's nonzeros are the changed elements the same way.
Elsewhere (beta = 1, Leaky's reset to zero, a reset to zero without reset_delay, Alpha) every
element is counted, an upper bound a note names.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from spiketrace.analyze.counters import neurobench_metrics
from tests.neurobench_models import CASES, SAMPLES, NeuroBenchCase, capture, run_neurobench


def leaky(**options) -> nn.Module:
    import snntorch as snn

    return nn.Sequential(snn.Leaky(init_hidden=True, output=True, **options))


# One sample, three steps, four neurons; currents with zeros (no spike: all stay below 1):
#   t0 [0.5, 0, 0, 0]    first call: every element counts           4
#   t1 [0, 0, 0.3, 0]    mem 0.5 * [0.5, 0, 0, 0] + t1 = [0.25, 0, 0.3, 0]: 2 changed
#   t2 [0, 0, 0, 0]      mem [0.125, 0, 0.15, 0]: 2 changed (the two zeros stay zero)
# MembraneUpdates = (4 + 2 + 2) / 1 sample = 8, where counting every element gives 12.
CURRENTS = [[[0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0]]]


def tiny_case(**options) -> NeuroBenchCase:
    return NeuroBenchCase("tiny-leaky", lambda: leaky(**{"beta": 0.5, "threshold": 1.0, **options}),
                          lambda: torch.tensor(CURRENTS), wrapper="SNNTorchModel")


def test_hand_derived_membrane_updates_of_a_leaky(tmp_path):
    pytest.importorskip("neurobench")
    case = tiny_case()
    theirs, printed = run_neurobench(case)
    assert "'MembraneUpdates'" not in printed, printed  # (its ConnectionSparsity divides by no weights)
    capture(case, tmp_path / "t")
    ours = neurobench_metrics(tmp_path / "t")
    assert theirs["MembraneUpdates"] == ours["MembraneUpdates"] == 8
    assert not any(note.startswith("MembraneUpdates") for note in ours.notes)


def test_a_leaky_conv_net_without_bias_equals_neurobench(tmp_path):
    """Issue 40's shape: 3 steps of 4 x 16 x 16 conv neurons and 10 linear ones, 5 samples in 3
    batches: 3 * 1034 = 3102 elements per sample, of which NeuroBench does not count those whose
    input and membrane stayed zero."""
    pytest.importorskip("neurobench")
    case = next(c for c in CASES if c.name == "snntorch-leaky-conv-no-bias")
    theirs, printed = run_neurobench(case)
    assert "Error" not in printed, printed
    capture(case, tmp_path / "t")
    ours = neurobench_metrics(tmp_path / "t")
    assert theirs["MembraneUpdates"] < 3 * (4 * 16 * 16 + 10)  # some elements did not change
    assert ours["MembraneUpdates"] == pytest.approx(theirs["MembraneUpdates"], rel=1e-12)


@pytest.mark.parametrize("options", [{"beta": 1.0}, {"reset_mechanism": "zero"}], ids=["no-leak", "reset-to-zero"])
def test_outside_the_rule_every_element_counts_and_a_note_says_it_is_a_bound(tmp_path, options):
    """beta = 1 keeps a nonzero membrane under zero input; a reset to zero moves a spiking
    element whatever its input: the add's nonzeros no longer tell the changed elements."""
    pytest.importorskip("neurobench")
    case = tiny_case(**options)
    theirs, _ = run_neurobench(case)
    capture(case, tmp_path / "t")
    ours = neurobench_metrics(tmp_path / "t")
    assert ours["MembraneUpdates"] == 3 * 4 >= theirs["MembraneUpdates"]
    assert any(note.startswith("MembraneUpdates: 2 snnTorch neuron calls") and "upper bound" in note
               for note in ours.notes)


class Neuron(nn.Module):
    """One snnTorch neuron fed the currents directly; (spikes, membrane), as SNNTorchModel takes."""

    def __init__(self, neuron: nn.Module) -> None:
        super().__init__()
        self.neuron = neuron

    def forward(self, x):
        out = self.neuron(x)
        return out[0], out[-1]


def _sparse_recurrence(neuron: nn.Module) -> nn.Module:
    """A Linear recurrence without bias, half its weights zero: a spike reaches some neurons."""
    with torch.no_grad():
        neuron.recurrent.bias.zero_()
        neuron.recurrent.weight.view(-1)[::2] = 0.0
    return neuron


NEURONS = {
    # alpha 0: the synaptic current is the input alone, so `alpha * syn + input` is not `base`
    "synaptic-alpha-0": lambda snn: snn.Synaptic(alpha=0.0, beta=0.8, threshold=0.5),
    "synaptic-reset-to-zero": lambda snn: snn.Synaptic(alpha=0.6, beta=0.8, threshold=0.5, reset_mechanism="zero"),
    "rleaky-linear": lambda snn: _sparse_recurrence(snn.RLeaky(beta=0.8, linear_features=6, threshold=0.5)),
    "rleaky-linear-reset-to-zero": lambda snn: _sparse_recurrence(
        snn.RLeaky(beta=0.8, linear_features=6, threshold=0.5, reset_mechanism="zero")),
    "rleaky-one-to-one": lambda snn: snn.RLeaky(beta=0.8, all_to_all=False, V=0.5, threshold=0.5),
    "rsynaptic-linear-alpha-0": lambda snn: _sparse_recurrence(
        snn.RSynaptic(alpha=0.0, beta=0.8, linear_features=6, threshold=0.5)),
    "rsynaptic-linear-reset-to-zero": lambda snn: _sparse_recurrence(
        snn.RSynaptic(alpha=0.6, beta=0.8, linear_features=6, threshold=0.5, reset_mechanism="zero")),
    "lapicque-beta": lambda snn: snn.Lapicque(beta=0.8, threshold=0.5),
    "lapicque-r-c-reset-to-zero": lambda snn: snn.Lapicque(R=5.1, C=5e-3, time_step=1e-2, threshold=0.5,
                                                           reset_mechanism="zero"),
}
# outside the rules: each counts every element, and NeuroBench fewer
BOUNDS = {
    # a neuron whose membrane was zero and fires now is set back to zero after its `base` was nonzero
    "synaptic-reset-to-zero-undelayed": lambda snn: snn.Synaptic(alpha=0.6, beta=0.8, threshold=0.5,
                                                                 reset_mechanism="zero", reset_delay=False),
    "alpha": lambda snn: snn.Alpha(alpha=0.8, beta=0.6, threshold=0.5),  # no op reads the old membrane
    "lapicque-beta-below-1/e": lambda snn: snn.Lapicque(beta=0.3, threshold=0.5),  # decay 1 + ln 0.3 < 0
}
STEPS, WIDTH = 6, 6  # 5 samples in batches of 2, 2, 1; every element of every step is 36 per sample


def _currents() -> torch.Tensor:
    """Currents in [0, 1), about 70 % of them zero."""
    generator = torch.Generator().manual_seed(3)
    values = torch.rand(SAMPLES, STEPS, WIDTH, generator=generator)
    return values * (torch.rand(SAMPLES, STEPS, WIDTH, generator=generator) < 0.3)


def neuron_case(name: str, make) -> NeuroBenchCase:
    def build() -> nn.Module:
        import snntorch as snn

        torch.manual_seed(0)
        return Neuron(make(snn))

    return NeuroBenchCase(name, build, _currents, wrapper="SNNTorchModel")


@pytest.mark.parametrize("name", NEURONS)
def test_each_neuron_with_a_rule_equals_neurobench(tmp_path, name):
    """Before the rules for these classes every element counted: 36 per sample."""
    pytest.importorskip("neurobench")
    case = neuron_case(name, NEURONS[name])
    theirs, printed = run_neurobench(case)
    assert "'MembraneUpdates'" not in printed, printed
    capture(case, tmp_path / "t")
    ours = neurobench_metrics(tmp_path / "t")
    assert theirs["MembraneUpdates"] < STEPS * WIDTH
    assert ours["MembraneUpdates"] == pytest.approx(theirs["MembraneUpdates"], rel=1e-12)
    assert not any(note.startswith("MembraneUpdates") for note in ours.notes)


@pytest.mark.parametrize("name", BOUNDS)
def test_neurons_outside_the_rules_stay_an_upper_bound_with_a_note(tmp_path, name):
    pytest.importorskip("neurobench")
    case = neuron_case(name, BOUNDS[name])
    theirs, _ = run_neurobench(case)
    capture(case, tmp_path / "t")
    ours = neurobench_metrics(tmp_path / "t")
    assert ours["MembraneUpdates"] == STEPS * WIDTH > theirs["MembraneUpdates"]
    assert any(note.startswith("MembraneUpdates:") and "upper bound" in note for note in ours.notes)


# An RLeaky (beta 0.5, threshold 1, reset by subtraction) over four neurons whose recurrent
# Linear has no bias and one weight, neuron 0's spike to neuron 3 with 0.25. One sample:
#   t0 [1.5, 0, 0, 0]    first call: every element counts                                4
#                        mem = 1.5 * e0, spk = [1, 0, 0, 0] (1.5 > 1)
#   t1 [0, 0, 0.3, 0]    reset [1, 0, 0, 0]; base = 0.5 * mem + t1 + W spk = [0.75, 0, 0.3, 0.25];
#                        mem = base - reset = [-0.25, 0, 0.3, 0.25]: 3 changed, spk 0      3
#   t2 [0, 0, 0, 0]      base = 0.5 * mem = [-0.125, 0, 0.15, 0.125]: 3 changed         3
# MembraneUpdates = 4 + 3 + 3 = 10; every element 12; the `beta * mem + input` add alone
# (Leaky's op) misses neuron 3 at t1: 9.
RLEAKY_CURRENTS = [[[1.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0]]]


def tiny_rleaky() -> nn.Module:
    import snntorch as snn

    neuron = snn.RLeaky(beta=0.5, threshold=1.0, linear_features=4, init_hidden=True, output=True)
    with torch.no_grad():
        neuron.recurrent.weight.zero_()
        neuron.recurrent.bias.zero_()
        neuron.recurrent.weight[3, 0] = 0.25
    return nn.Sequential(neuron)


def test_hand_derived_membrane_updates_of_an_rleaky(tmp_path):
    pytest.importorskip("neurobench")
    case = NeuroBenchCase("tiny-rleaky", tiny_rleaky, lambda: torch.tensor(RLEAKY_CURRENTS), wrapper="SNNTorchModel")
    theirs, printed = run_neurobench(case)
    assert "'MembraneUpdates'" not in printed, printed
    capture(case, tmp_path / "t")
    ours = neurobench_metrics(tmp_path / "t")
    assert theirs["MembraneUpdates"] == ours["MembraneUpdates"] == 10
    assert not any(note.startswith("MembraneUpdates") for note in ours.notes)
