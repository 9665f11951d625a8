"""Bulk NeuroMC costing equals one cost() call per preset, including the weight-reuse decision."""

from __future__ import annotations

import numpy as np
import pytest

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import load_preset, recost
from spiketrace.analyze.energy.neuromc import activity, cost
from spiketrace.analyze.energy.neuromc.sweep import sweep_totals
from spiketrace.capture import Recorder
from tests.zoo import CASES, OPTIMIZERS, build


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "trace"
    case = CASES[0]
    model, x = build(case)
    optimizer = OPTIMIZERS["adam"](model.parameters())
    with Recorder(path, model=model, optimizer=optimizer) as recorder:
        for _ in range(1):
            with recorder.stage("forward", reuse_weights=True):
                out = model(x)
            with recorder.stage("backward"):
                case.loss_fn(out, case.target(out)).backward()
            with recorder.stage("optimizer"):
                optimizer.step()
    return path


def test_bulk_totals_equal_per_preset_costing(trace_path):
    base = load_preset("neuromc-like-v1")
    weight_sram = "sram_fp_conv_in_w"
    rng = np.random.default_rng(0)
    n = 12
    values = {
        f"memory_instances.{weight_sram}.r_cost": rng.uniform(0.5, 9.0, n),
        f"memory_instances.{weight_sram}.size_bits": rng.choice([16.0, 1e3, 1e5, 5e6], n),  # fits or not
        "memory_instances.sram_6MB.r_bw": rng.choice([16.0, 64.0, 256.0], n),
        "mac_cost_pj.fp_soma": rng.uniform(0.1, 2.0, n),
    }
    with open_trace(trace_path) as trace:
        mapped = activity(trace)
        bulk = sweep_totals(mapped, base.costs(), values)
        for i in range(n):
            one = cost(mapped, base.derive({k: float(v[i]) for k, v in values.items()}).costs())
            assert bulk["energy_total_pj"][i] == pytest.approx(one.energy_total_pj, rel=1e-9)
            assert bulk["energy_memory_pj"][i] == pytest.approx(one.energy_memory_pj, rel=1e-9)
    assert bulk["energy_total_pj"].nunique() > 1


def test_recost_sweep_uses_bulk_costing(trace_path):
    with open_trace(trace_path) as trace:
        frame = recost(trace, "neuromc", sweep={"memory_instances.sram_6MB.r_cost": [1.0, 2.0],
                                                 "memory_instances.dram.r_bw": [32.0, 64.0, 128.0]})
        single = recost(trace, "neuromc", ["neuromc-like-v1"])
    totals = frame[frame["key"] == "energy_total_pj"]
    assert len(totals) == 6 and set(totals["memory_instances.sram_6MB.r_cost"]) == {1.0, 2.0}
    base_total = single.loc[single["key"] == "energy_total_pj", "pj"].iloc[0]
    assert totals["pj"].min() <= base_total * 10  # same order of magnitude as the base preset
    with pytest.raises(Exception, match="cannot be negative|energy cannot be negative"):
        recost(open_trace(trace_path), "neuromc", sweep={"memory_instances.dram.r_cost": [-1.0, 1.0]})
