"""MembraneUpdates (analyze/counters/neurobench/activation.py): NeuroBench 2.3.0 counts, after a
batch's first call, the membrane elements that changed, count_nonzero(mem before - mem after).

snnTorch's Leaky integrates `beta * mem + input` in one add; with 0 < beta < 1 and a positive
threshold an element changes exactly when its membrane or its input is nonzero, so the changed
elements are that add's nonzeros, which the trace holds. Elsewhere (beta = 1, reset to zero,
another neuron) every element is counted, an upper bound a note names.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from spiketrace.analyze.counters import neurobench_metrics
from tests.neurobench_models import CASES, NeuroBenchCase, capture, run_neurobench


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
