"""Every model costs a sweep in bulk (its sweep_totals, array arithmetic over the activity),
and the bulk totals equal the model's own cost() of each derived preset, one by one.

The reference is the per-preset costing path (module.cost on the preset that sweep_presets
derives), which the differential tests tie to SpikingJelly. Keys a model cannot sweep in
bulk (Qualia's SRAM estimate, a crossbar size) fall back to that path.
"""

from __future__ import annotations

import math

import pytest

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import _model, load_preset, map_activity, recost, sweep_presets
from tests.training_runs import record

SWEEPS = {  # case -> (model, base preset, overrides of the base, sweep, total's key)
    "compute": ("compute", "compute-fp16-45nm", (), {"e_mac_pj": [0.5, 1.0, 4.6], "e_memory_pj_per_byte": [1.0, 24.96]},
                "energy_total_pj"),
    "lemaire": ("lemaire", "lemaire-spikingjelly", (),
                {"e_add_pj": [0.05, 0.1], "memory_breakpoints.p1.pj_per_byte": [1.0, 2.5],
                 "memory_breakpoints.p2.capacity_bytes": [16384.0, 65536.0], "snn_fifo_capacity_elements": [10, 1000]},
                "total_pj"),
    "lemaire qualia": ("lemaire", "lemaire-qualia", (),
                       {"qualia.ram_slope": [1e-5, 3e-5], "qualia.ram_floor": [0.0, 13.2], "e_mul_pj": [1.0, 3.1],
                        "snn_fifo_capacity_elements": [10, 1000]}, "total_pj"),
    "lemaire qualia new sram": ("lemaire", "lemaire-qualia", ("qualia.sram_estimation=new",),
                                {"qualia.bus_access": [5.0, 10.0], "qualia.bus_width": [64, 128]}, "total_pj"),
    "spikesim dense": ("spikesim", "spikesim-rram-64", (), {"adc_pj": [1.0, 2.03], "neuron_pj": [0.5, 5.0],
                                                             "rram_xbar_pj": [1.0, 1.76]}, "energy_total_pj"),
    "spikesim event": ("spikesim", "spikesim-sram-64", ("activity_mode=event",),
                       {"htree_pj": [10.0, 157.0], "sram_xbar_pj": [100.0, 671.0]}, "energy_total_pj"),
}


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    return record(tmp_path_factory.mktemp("bulk") / "trace", 2)


def total_of(report, key: str) -> float:
    return getattr(report, key)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", list(SWEEPS))
def test_bulk_sweep_equals_costing_each_preset(trace_path, case):
    model, preset, overrides, sweep, key = SWEEPS[case]
    base = load_preset(preset, overrides)
    with open_trace(trace_path) as trace:
        activity = map_activity(trace, model)
        frame = recost(trace, model, sweep=sweep, base=base, activity=activity)
    module = _model(model)
    expected = [total_of(module.cost(activity, p.costs()), key) for p in sweep_presets(base, sweep)]
    assert len(expected) == math.prod(len(v) for v in sweep.values())
    assert set(frame["breakdown"]) == {"total"}  # the bulk path: totals only
    got = frame[frame["key"] == key]["pj"].tolist()
    assert len(got) == len(expected) and max(expected) > 0
    for a, b in zip(got, expected):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (a, b)
    # the swept values are the presets' (first key slowest, as sweep_presets orders them)
    first = next(iter(sweep))
    assert frame[frame["key"] == key][first].tolist() == [float(v) for v in sweep[first]
                                                          for _ in range(len(expected) // len(sweep[first]))]


@pytest.mark.parametrize("model, preset, sweep", [
    ("lemaire", "lemaire-qualia", {"qualia.sram_estimation": ["old", "new"]}),
    ("spikesim", "spikesim-rram-64", {"xbar_size": [32, 64]}),
])
def test_keys_outside_the_bulk_path_are_costed_preset_by_preset(trace_path, model, preset, sweep):
    with open_trace(trace_path) as trace:
        frame = recost(trace, model, sweep=sweep, base=preset)
        expected = [total_of(energy_report, "total_pj" if model == "lemaire" else "energy_total_pj")
                    for energy_report in (_model(model).cost(map_activity(trace, model), p.costs())
                                          for p in sweep_presets(load_preset(preset), sweep))]
    assert "component" in set(frame["breakdown"])  # whole reports: the per-preset path
    totals = frame[frame["breakdown"] == "total"]
    got = totals[totals["key"].isin(["total_pj", "energy_total_pj"])]["pj"].tolist()
    assert len(got) == 2 and all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(got, expected))
