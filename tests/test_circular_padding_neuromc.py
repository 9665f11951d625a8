"""A circular-padded conv under NeuroMC, SpikingJelly 2.0.0 run live beside the trace.

Conv2d(padding_mode="circular") runs F.pad, then F.conv2d with padding 0: the aten.convolution
inside its call sees the padded input. SpikingJelly maps the module call (input_numel of the
unpadded x) and the op (a trace fragment, input_numel of the padded x); its duplicate test
compares signatures with the input numel, so it keeps both and costs the conv twice.
compat="spikingjelly" equals that report; default mode costs the conv once, as with zero
padding (docs/deviations.md 17).
"""

from __future__ import annotations

import math
import warnings

import snntorch as snn
import torch
from torch import nn

from spiketrace.analyze import open_trace
from tests.test_neuromc_differential import assert_same_report, report, run, spikingjelly_report


class Net(nn.Module):
    def __init__(self, padding_mode: str):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1, padding_mode=padding_mode)
        self.lif1 = snn.Leaky(beta=0.9, init_hidden=True)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.lif2 = snn.Leaky(beta=0.9, init_hidden=True)

    def forward(self, x):
        return self.lif2(self.conv2(self.lif1(self.conv1(x))))


def both(tmp_path, padding_mode):
    """(SpikingJelly's live report, ours under compat, ours by default) of one inference run."""
    torch.manual_seed(1)
    x = (torch.rand(2, 1, 8, 8) > 0.5).float()
    (tmp_path / padding_mode).mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path, profiler, _ = run(tmp_path / padding_mode, Net(padding_mode), x)
        # snnTorch's ops have no NeuroMC rule: SpikingJelly's refusal is bypassed, as in the zoo tests
        theirs = spikingjelly_report(profiler, refuse=False)
        with open_trace(path) as trace:
            return theirs, report(trace, compat="spikingjelly"), report(trace)


def test_circular_padding_counted_twice_like_spikingjelly_and_once_by_default(tmp_path):
    theirs, compat, default = both(tmp_path, "circular")
    assert_same_report(compat, theirs)
    # SpikingJelly's fragments of conv1: the module call (128 = 2 x 1 x 8 x 8 inputs) and the op
    # (200 = 2 x 1 x 10 x 10 padded inputs), both 2 x 4 x 8 x 8 x 1 x 3 x 3 = 4,608 MACs
    conv1 = [(f["op_name"], f["source"], f["mac_count"]) for f in theirs.mapping_summary if f["loop_dims"]["C"] == 1]
    assert conv1 == [("conv.forward", "module", 4608), ("aten.convolution.default", "trace", 4608)]
    twice = theirs.energy_by_op["aten.convolution.default"]
    assert math.isclose(compat.energy_by_module["Net.conv1"], 2 * twice, rel_tol=1e-12)
    # default: conv1 once, no trace fragment; the convs cost what they cost with zero padding
    zeros_theirs, zeros_compat, zeros_default = both(tmp_path, "zeros")
    assert "aten.convolution.default" not in default.energy_by_op
    assert math.isclose(default.energy_by_module["Net.conv1"], twice, rel_tol=1e-12)
    assert math.isclose(default.energy_by_op["conv.forward"], zeros_theirs.energy_by_op["conv.forward"], rel_tol=1e-12)
    assert math.isclose(compat.energy_total_pj - twice, zeros_compat.energy_total_pj, rel_tol=1e-12)
