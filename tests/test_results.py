"""Analysis: each result computed once. The report, plots and diff take results and never
map a trace again; re-costing under another preset does not re-map."""

from __future__ import annotations

import pytest
import torch
from spikingjelly.activation_based import neuron
from torch import nn

import spiketrace.analyze
from spiketrace.analyze import Analysis, open_trace
from spiketrace.analyze.energy import energy
from spiketrace.analyze.present import plots
from spiketrace.analyze.present.diff import diff_traces
from spiketrace.analyze.present.report import build_report
from spiketrace.capture import record_training_step


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(12, 16), neuron.IFNode(), nn.Linear(16, 4), neuron.IFNode())
    x = (torch.rand(8, 12) > 0.5).float()
    y = torch.randint(0, 4, (8,))
    path = tmp_path_factory.mktemp("results") / "step"
    record_training_step(path, net, x, target=y, loss_fn=nn.functional.cross_entropy,
                         optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    return path


@pytest.fixture
def calls(engine_calls):
    return engine_calls  # tests/conftest.py: the NeuroMC mapper and counter engine, counted


def test_report_maps_the_model_once_and_counts_once(trace_path, calls):
    with Analysis(trace_path) as analysis:
        page = build_report(analysis, model="neuromc")
        # summary, energy by component and stage, two energy plots: one mapping; the count
        # table and the roofline: one run of the counters
        assert calls == {"neuromc": 1, "counters": 1}
        assert "energy per layer" in page and "roofline" in page
        diff_traces(analysis, analysis, model="neuromc")  # the report's results again
        assert calls == {"neuromc": 1, "counters": 1}


def test_another_preset_is_recosted_not_remapped(trace_path, calls):
    with Analysis(trace_path) as analysis, open_trace(trace_path) as trace:
        base = analysis.energy("neuromc")
        derived = analysis.energy("neuromc", overrides=["mac_cost_pj.wg=100"])
        assert calls["neuromc"] == 1
        # equal to the uncached path, which maps again
        assert base.energy_total_pj == pytest.approx(energy(trace, "neuromc").energy_total_pj, rel=1e-12)
        again = energy(trace, "neuromc", overrides=["mac_cost_pj.wg=100"])
        assert derived.energy_total_pj == pytest.approx(again.energy_total_pj, rel=1e-12)
        assert calls["neuromc"] == 3
        assert derived.energy_total_pj > base.energy_total_pj  # the override is priced, not ignored


def test_plots_of_one_opened_trace_share_its_analysis(trace_path, calls):
    with open_trace(trace_path) as trace:
        plots.energy_by_layer(trace, "neuromc")
        plots.stage_breakdown(trace, "neuromc")
        assert calls["neuromc"] == 1
        assert Analysis.of(trace) is Analysis.of(trace)


def test_energy_is_callable_from_the_top_level(trace_path):
    with open_trace(trace_path) as trace:
        a = spiketrace.analyze.energy(trace, "compute").energy_total_pj
        b = spiketrace.analyze.energy.energy(trace, "compute").energy_total_pj
        assert a == b > 0
        frame = spiketrace.analyze.recost(trace, "compute", ["compute-fp32-45nm", "compute-int8-45nm"])
        assert set(frame["preset"]) == {"compute-fp32-45nm", "compute-int8-45nm"}
