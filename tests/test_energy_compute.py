"""The compute model equals SpikingJelly 2.0.0's SimpleEnergyProfiler on the same run.

SimpleEnergyProfiler's memory counter probes conv fan-out from a module hook, and those
probe ops reach any dispatch mode on the stack, a recorder included. So each test runs the
same seeded model twice in the test — once under SpikingJelly's profiler, once under our
Recorder — and compares; on CPU both runs are bit-identical.
"""

from __future__ import annotations

import math

import pytest
from spikingjelly.activation_based.op_counter import (
    SimpleEnergyConfig,
    SimpleEnergyCostConfig,
    SimpleEnergyProfiler,
)

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count, mac, synop
from spiketrace.analyze.energy import energy, load_preset, recost
from spiketrace.analyze.energy.compute import Costs
from spiketrace.capture import Recorder
from tests.zoo import CASE_IDS, CASES, OPTIMIZERS, build, run_steps

PRESETS = {"compute-fp32-45nm": SimpleEnergyCostConfig.fp32(), "compute-fp16-45nm": SimpleEnergyCostConfig.fp16(),
           "compute-int8-45nm": SimpleEnergyCostConfig.int8()}


def spikingjelly_report(case, optimizer_name, cost_config):
    model, x = build(case)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters()) if optimizer_name else None
    profiler = SimpleEnergyProfiler(config=SimpleEnergyConfig(cost_config=cost_config))
    profiler.bind_model(model)
    with profiler:
        run_steps(None, model, x, case, optimizer)
    return profiler.get_report()


def record(tmp_path, case, optimizer_name):
    model, x = build(case)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters()) if optimizer_name else None
    with Recorder(tmp_path / "trace", model=model, optimizer=optimizer) as recorder:
        run_steps(recorder, model, x, case, optimizer)
    return tmp_path / "trace"


def assert_close(got: float, expected: float) -> None:
    assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12), (got, expected)


@pytest.mark.parametrize("optimizer_name", [None, "sgd_momentum"], ids=["forward", "sgd"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_compute_energy_equals_spikingjelly_in_compat_mode(tmp_path, case, optimizer_name):
    expected = spikingjelly_report(case, optimizer_name, SimpleEnergyCostConfig.fp32())
    with open_trace(record(tmp_path, case, optimizer_name)) as trace:
        got = energy(trace, "compute", "compute-fp32-45nm", compat="spikingjelly")
        default = energy(trace, "compute", "compute-fp32-45nm")
        ac_alone = count(trace, ["ac"]).totals()["ac"]
        products = count(trace, ["mac", "synop"]).frame.query("scope == 'Global'")
        extra = {name: int(products[(products.counter == name) & products.op.isin(list(rules))].value.sum())
                 for name, rules in (("mac", mac.EXTRA_RULES), ("synop", synop.EXTRA_RULES))}
    assert got.counts == expected.counts
    for field in ("energy_total_pj", "energy_compute_pj", "energy_mac_pj", "energy_ac_pj", "energy_memory_pj"):
        assert_close(getattr(got, field), getattr(expected, field))
    assert got.breakdown_pj.keys() == expected.breakdown_pj.keys()
    for key, value in expected.breakdown_pj.items():
        assert_close(got.breakdown_pj[key], value)
    # by default AC is the AC counter's alone: no profiler probe leaks into it; MAC and SynOp
    # add what the rules beyond SpikingJelly count (a conv's backward products: conv_backward.py)
    assert default.counts["ac"] == ac_alone
    for name in ("mac", "synop"):
        assert default.counts[name] - got.counts[name] == extra[name], name
    assert default.counts | {name: got.counts[name] for name in ("ac", "mac", "synop")} == got.counts


def test_conv_probe_leak_hand_derived(tmp_path):
    """Sequential(Conv2d(2, 3, 3, padding=1), IF) on x(2, 2, 5, 5) spikes: the profiler's
    probe sums an occupancy map of N * groups * OH * OW = 2 * 1 * 5 * 5 = 50 elements, which
    its ACCounter counts as 49 additions (the spec's 1312 vs 1263)."""
    import torch
    from spikingjelly.activation_based import neuron
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), neuron.IFNode())
    x = (torch.rand(2, 2, 5, 5) > 0.5).float()
    with Recorder(tmp_path / "trace", model=model):
        model(x)
    with open_trace(tmp_path / "trace") as trace:
        compat = energy(trace, "compute", compat="spikingjelly")
        default = energy(trace, "compute")
    assert compat.counts["ac"] - default.counts["ac"] == 49


@pytest.mark.parametrize("preset", list(PRESETS))
def test_shipped_presets_are_spikingjelly_configs(preset):
    expected = PRESETS[preset]
    assert load_preset(preset).costs() == Costs(expected.e_mac_pj, expected.e_ac_pj, expected.e_memory_pj_per_byte)


def test_recost_equals_one_energy_call_per_preset(tmp_path):
    case = CASES[1]
    expected = {name: spikingjelly_report(case, None, config) for name, config in PRESETS.items()}
    with open_trace(record(tmp_path, case, None)) as trace:
        frame = recost(trace, "compute", list(PRESETS), compat="spikingjelly")
        swept = recost(trace, "compute", sweep={"e_mac_pj": [1.0, 2.0], "e_ac_pj": [0.1, 0.2, 0.3]})
        single = energy(trace, "compute")
    totals = frame[frame["key"] == "energy_total_pj"].set_index("preset")["pj"]
    for name, report in expected.items():
        assert_close(totals[name], report.energy_total_pj)
    sweep_totals = swept[swept["key"] == "energy_total_pj"]
    assert len(sweep_totals) == 6
    n = single.counts
    memory_pj = single.energy_memory_pj
    for row in sweep_totals.itertuples():
        assert_close(row.pj, n["mac"] * row.e_mac_pj + n["ac"] * row.e_ac_pj + memory_pj)


def test_energy_and_recost_cli(tmp_path):
    import json

    import pandas as pd
    from click.testing import CliRunner

    from spiketrace.analyze.cli import main

    path = record(tmp_path, CASES[0], "sgd_momentum")
    runner = CliRunner()
    shown = runner.invoke(main, ["energy", str(path), "--model", "compute", "--preset", "compute-int8-45nm",
                                 "--set", "e_ac_pj=0.05", "--format", "json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)  # stderr carries the scope warning (a training trace)
    with open_trace(path) as trace:
        report = energy(trace, "compute", "compute-int8-45nm", overrides=["e_ac_pj=0.05"])
    assert document["counts"] == report.counts
    assert_close(document["energy_total_pj"], report.energy_total_pj)
    assert set(document["energy_by_stage"]) == {"forward", "backward", "optimizer"}
    table = runner.invoke(main, ["energy", str(path), "--by", "stage"])
    assert table.exit_code == 0 and "forward" in table.output and "share" in table.output
    out = tmp_path / "sweep.parquet"
    swept = runner.invoke(main, ["recost", str(path), "--model", "compute", "--preset", "compute-fp16-45nm",
                                 "--sweep", "e_mac_pj=1:3:3", "--out", str(out)])
    assert swept.exit_code == 0, swept.output
    frame = pd.read_parquet(out)
    # the sweep varies the preset named (fp16), not the default with fp16 as one extra point
    assert frame["preset"].nunique() == 3
    assert sorted(frame["e_mac_pj"].unique()) == [1.0, 2.0, 3.0]
    assert set(frame["preset"]) == {f"compute-fp16-45nm[e_mac_pj={v} pJ]" for v in (1, 2, 3)}
    fp16 = load_preset("compute-fp16-45nm").flat()
    assert (frame["preset"].str.startswith("compute-fp16-45nm")).all()
    one = frame[(frame["e_mac_pj"] == 2.0) & (frame["key"] == "energy_total_pj")]
    with open_trace(path) as trace:  # the other keys are fp16's: the same as costing fp16 with e_mac_pj=2
        expected = energy(trace, "compute", "compute-fp16-45nm", overrides=["e_mac_pj=2"]).energy_total_pj
    assert fp16["e_mac_pj"] != 2.0
    assert_close(float(one["pj"].iloc[0]), expected)
    bad = runner.invoke(main, ["energy", str(path), "--model", "compute", "--set", "e_mac_pj=-2"])
    assert bad.exit_code == 2 and bad.output.startswith("error: ") and "e_mac_pj" in bad.output


def _both(tmp_path, model, x, *, strict):
    """SpikingJelly's estimate (its report, or the exception it raised) and the recorded trace of the same call."""
    import torch
    from spikingjelly.activation_based import functional

    profiler = SimpleEnergyProfiler(config=SimpleEnergyConfig(strict=strict))
    profiler.bind_model(model)
    with profiler, torch.no_grad():
        model(x)
    try:
        expected = profiler.get_report()
    except RuntimeError as refusal:
        expected = refusal
    functional.reset_net(model)
    with Recorder(tmp_path / "trace", model=model), torch.no_grad():
        model(x)
    return expected, tmp_path / "trace"


def test_strict_refuses_only_when_nothing_matched(tmp_path):
    """SimpleEnergyConfig.strict: SpikingJelly counts with a non-strict dispatch mode, so a
    Linear's `aten.t` (no mac/ac/synop rule) is no refusal; before, strict raised on it where
    it counts as uncovered (compat: StrictModeError "strict: mac has no rule for aten.t.default"),
    now both modes equal SpikingJelly's report."""
    import dataclasses

    import torch
    from spikingjelly.activation_based import neuron
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), neuron.IFNode())
    expected, path = _both(tmp_path, model, torch.rand(2, 4), strict=True)
    with open_trace(path) as trace:
        got = energy(trace, "compute", strict=True)
        compat = energy(trace, "compute", compat="spikingjelly", strict=True)  # where every op without a rule is uncovered
    for report in (got, compat):
        assert report.counts == expected.counts and report.warnings == expected.warnings == []
        assert_close(report.energy_total_pj, expected.energy_total_pj)
    assert got.model_info == dataclasses.asdict(expected.model_info)  # before: no model_info at all


def test_nothing_matched_is_refused_alike(tmp_path):
    """A ReLU alone: no rule of the three counters and no module the memory counter knows.
    SpikingJelly warns, and with strict raises RuntimeError, with the same message."""
    import torch
    from torch import nn

    model = nn.Sequential(nn.ReLU())
    expected, path = _both(tmp_path / "lenient", model, torch.rand(2, 4), strict=False)
    refusal, _ = _both(tmp_path / "strict", model, torch.rand(2, 4), strict=True)
    with open_trace(path) as trace:
        assert energy(trace, "compute").warnings == expected.warnings and len(expected.warnings) == 1
        with pytest.raises(RuntimeError) as ours:
            energy(trace, "compute", strict=True)
    assert isinstance(refusal, RuntimeError) and str(ours.value) == str(refusal)


def test_empty_batch_matched_something(tmp_path):
    """A Linear on an empty batch: its addmm matched a rule with the value 0, and the Linear's
    call reached the memory counter, so SpikingJelly does not warn. Before, spiketrace warned
    because the values summed to 0 (and strict raised)."""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 3))
    expected, path = _both(tmp_path, model, torch.rand(0, 4), strict=True)
    with open_trace(path) as trace:
        got = energy(trace, "compute", strict=True)
    assert got.warnings == expected.warnings == [] and got.energy_total_pj == expected.energy_total_pj == 0
