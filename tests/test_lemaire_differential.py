"""Lemaire energy from a trace: convention "spikingjelly" equals SpikingJelly 2.0.0's
LemaireEnergyProfiler / estimate_lemaire_energy run live on the same model in the same `with`;
convention "qualia" equals the golden numbers Qualia 2.6.0 itself produced
(tests/oracles/qualia_lemaire.py made tests/oracles/qualia_lemaire_golden.json; Qualia is not
needed here). Plus one hand-derived tiny case per convention and the preset files.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import tomllib
import warnings
from pathlib import Path

import pytest
import torch
from spikingjelly.activation_based import functional, layer, neuron
from spikingjelly.activation_based.op_counter import (
    LemaireEnergyConfig,
    LemaireEnergyCostConfig,
    LemaireEnergyProfiler,
    estimate_lemaire_energy,
)
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import energy, lemaire, load_preset, recost
from spiketrace.analyze.presets import PRESET_DIR
from spiketrace.capture import Recorder
from tests.zoo import CASE_IDS, CASES, OPTIMIZERS, build, dense, run_steps, spikes

ORACLES = Path(__file__).resolve().parent / "oracles"
GOLDEN = json.loads((ORACLES / "qualia_lemaire_golden.json").read_text())
_spec = importlib.util.spec_from_file_location("qualia_lemaire_oracle", ORACLES / "qualia_lemaire.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)  # the model builders only: it imports Qualia only when run by hand


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def assert_report_equals(ours, theirs) -> None:
    """Every field of SpikingJelly's LemaireEnergyReport: counts and buffers exactly, pJ to 1e-9."""
    assert ours.counts == theirs.counts
    assert ours.buffer_sizes_bytes == theirs.buffer_sizes_bytes
    assert ours.breakdown_pj.keys() == theirs.breakdown_pj.keys()
    for key, value in theirs.breakdown_pj.items():
        assert close(ours.breakdown_pj[key], value), (key, ours.breakdown_pj[key], value)
    assert close(ours.total_pj, theirs.total_pj)
    assert ours.warnings == theirs.warnings
    config = theirs.config
    assert ours.config["strict"] == config.strict
    assert ours.config["snn_fifo_capacity_elements"] == config.snn_fifo_capacity_elements
    assert ours.config["cost_config"] == {"e_add_pj": config.cost_config.e_add_pj, "e_mul_pj": config.cost_config.e_mul_pj,
                                          "memory_breakpoints": [list(p) for p in config.cost_config.memory_breakpoints]}
    info = theirs.model_info
    assert ours.model_info == {"model_id": info.model_id, "fidelity": info.fidelity,
                               "source_urls": list(info.source_urls), "technology_nm": info.technology_nm,
                               "precision": info.precision, "scope": info.scope}


def ours(trace_path, stage=None, preset="lemaire-spikingjelly", **options):
    with open_trace(trace_path) as trace:
        return energy(trace, model="lemaire", preset=preset, stage=stage, **options)


# --- convention "spikingjelly": the zoo, SpikingJelly non-strict (it keeps costing what it supports) --

def profile_zoo(tmp_path, case, optimizer_name):
    model, x = build(case)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters()) if optimizer_name else None
    profiler = LemaireEnergyProfiler(config=LemaireEnergyConfig(strict=False))
    profiler.bind_model(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with Recorder(tmp_path / "trace", model=model, optimizer=optimizer) as recorder, profiler:
            run_steps(recorder, model, x, case, optimizer)
    return profiler.get_report()


@pytest.mark.parametrize("optimizer_name", [None, "sgd_momentum"], ids=["forward", "sgd"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_zoo_equals_spikingjelly(tmp_path, case, optimizer_name):
    expected = profile_zoo(tmp_path, case, optimizer_name)
    report = ours(tmp_path / "trace")
    assert_report_equals(report, expected)
    # SpikingJelly's module hooks fire on forward calls only: a training step's backward and
    # optimizer stages add nothing, and the forward stage alone is the whole report.
    assert close(sum(report.energy_by_stage.values()), report.total_pj)
    assert close(sum(report.energy_by_module.values()), report.total_pj)
    assert_report_equals(ours(tmp_path / "trace", stage="forward"), expected)
    if optimizer_name:
        assert ours(tmp_path / "trace", stage="backward").total_pj == 0.0
        return
    # SpikingJelly's default strict=True refuses a model with any module outside the paper's
    # scope (Flatten, BN, pooling, PLIF, ConvTranspose...); strict=True here raises the same error.
    model, x = build(case)
    try:
        estimate_lemaire_energy(model, x)
    except ValueError as refusal:
        with pytest.raises(ValueError) as raised:
            ours(tmp_path / "trace", strict=True)
        assert str(raised.value) == str(refusal)
    else:
        assert ours(tmp_path / "trace", strict=True).warnings == []


# --- own small models that SpikingJelly's strict default accepts ------------------------------------

class StrictConv(nn.Module):
    """Conv2d -> IF -> grouped strided Conv2d without bias -> LIF -> (functional flatten) -> Linear -> IF."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1)
        self.sn1 = neuron.IFNode()
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2, groups=2, bias=False)
        self.sn2 = neuron.LIFNode(tau=2.0)
        self.fc = nn.Linear(36, 3)
        self.sn3 = neuron.IFNode()

    def forward(self, x):
        return self.sn3(self.fc(self.sn2(self.conv2(self.sn1(self.conv1(x)))).flatten(1)))


class StrictMultiStep(nn.Module):
    """Multi-step: layer.Conv1d -> IF -> (functional flatten) -> layer.Linear -> LIF, on [T, B, C, L]."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv1d(3, 4, 3)
        self.sn1 = neuron.IFNode()
        self.fc = layer.Linear(24, 5)
        self.sn2 = neuron.LIFNode(tau=2.0)
        functional.set_step_mode(self, "m")

    def forward(self, x):
        return self.sn2(self.fc(self.sn1(self.conv(x)).flatten(2)))


class StrictDenseConv3d(nn.Module):
    """No neurons at all: dense Conv3d -> (functional relu, flatten) -> Linear. A model without
    neurons is charged its dense layers' output writes (SpikingJelly's model_has_neurons rule)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(1, 2, (2, 3, 3), stride=(1, 2, 2))
        self.fc = nn.Linear(2 * 2 * 3 * 3, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class StrictKeywords(nn.Module):
    """Modules called with keyword tensors only (SpikingJelly then takes the first keyword tensor)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.sn = neuron.LIFNode(tau=2.0)

    def forward(self, x):
        return self.sn(x=self.fc(input=x))


STRICT_MODELS = {
    "keywords": (StrictKeywords, lambda: spikes(3, 6, p=0.5), 2),
    "conv": (StrictConv, lambda: spikes(2, 2, 8, 8, p=0.4), 2),
    "multistep": (StrictMultiStep, lambda: spikes(3, 2, 3, 8, p=0.4), 1),
    "dense_conv3d": (StrictDenseConv3d, lambda: dense(2, 1, 3, 7, 7), 1),
}


@pytest.mark.parametrize("name", list(STRICT_MODELS))
def test_strict_models_equal_estimate_lemaire_energy(tmp_path, name):
    """SpikingJelly's own entry point, default config (strict), around the recorded run; a
    single-step model is run T times inside one profiler context."""
    build_model, make_input, steps = STRICT_MODELS[name]
    torch.manual_seed(0)
    model, x = build_model(), make_input()
    with torch.no_grad():  # weights big enough for spikes
        for parameter in model.parameters():
            parameter.mul_(3.0)
    profiler = LemaireEnergyProfiler()
    profiler.bind_model(model)
    with Recorder(tmp_path / "trace", model=model) as recorder, profiler, torch.no_grad():
        with recorder.stage("forward"):
            for _ in range(steps):
                model(x)
    expected = profiler.get_report()
    assert expected.counts["ac"] > 0
    assert_report_equals(ours(tmp_path / "trace", strict=True), expected)
    if name == "dense_conv3d":  # and the one-call convenience function itself
        functional.reset_net(model)
        with Recorder(tmp_path / "again", model=model) as recorder, recorder.stage("forward"):
            expected = estimate_lemaire_energy(model, x)
        assert expected.counts["write_out_bytes"] > 0
        assert_report_equals(ours(tmp_path / "again", strict=True), expected)


def test_recosting_matches_spikingjelly_under_another_cost_config(tmp_path):
    """A preset override re-costs the same activity as SpikingJelly does with that config."""
    model, x = build(CASES[0])
    config = LemaireEnergyConfig(strict=False, snn_fifo_capacity_elements=64, cost_config=LemaireEnergyCostConfig(
        e_add_pj=0.03, e_mul_pj=0.2, memory_breakpoints=((0.0, 1.0), (64.0, 2.0), (4096.0, 3.0), (65536.0, 9.0))))
    profiler = LemaireEnergyProfiler(config=config)
    profiler.bind_model(model)
    with Recorder(tmp_path / "trace", model=model) as recorder, profiler:
        run_steps(recorder, model, x, CASES[0])
    base = load_preset("lemaire-spikingjelly")
    derived = base.derive({"e_add_pj": 0.03, "e_mul_pj": 0.2, "snn_fifo_capacity_elements": 64,
                           **{f"memory_breakpoints.p{i}.{leaf}": v for i, point in
                              enumerate(config.cost_config.memory_breakpoints)
                              for leaf, v in zip(("capacity_bytes", "pj_per_byte"), point)}})
    expected = profiler.get_report()
    expected.config.strict = False  # the profiler's strictness, not a cost: ours is the call's
    assert_report_equals(ours(tmp_path / "trace", preset=derived), expected)


# --- hand-derived tiny case, convention "spikingjelly" --------------------------------------------

def tiny(linear_class):
    """Linear(4 -> 2) + IF. W = [[1, 1, 0, 0], [0, 0, 0.5, 0]], b = [0.5, 0.1]."""
    model = nn.Sequential(linear_class(4, 2), neuron.IFNode())
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.0]]))
        model[0].bias.copy_(torch.tensor([0.5, 0.1]))
    return model


TINY_X = torch.tensor([[1.0, 0.0, 1.0, 0.0]])  # binary, 2 spikes, batch 1


def test_hand_derived_spikingjelly(tmp_path):
    # One forward of x = [1, 0, 1, 0]: out = W x + b = [1.5, 0.6]; IF (threshold 1) spikes [1, 0].
    # Linear, spike input, a = nnz(x) = 2:
    #   synop = a * out_features = 4; ac = 4 + bias numel(out) 2 = 6; acc_addr = a * out_features = 4
    #   read_in 2 * 4 B = 8 B at the FIFO (1000 * 4 = 4000 B)
    #   read_params (4 weight uses + 2 bias) * 4 B = 24 B at the params buffer (8 + 2) * 4 = 40 B
    #   read/write_potential 4 * 4 B = 16 B each at numel(out) * 4 = 8 B
    # IF, T = 1: read/write_potential numel(out) * 4 = 8 B each at 8 B; ac += nnz(out) = 1;
    #   write_out 1 * 4 = 4 B at the FIFO.
    # Totals: ac 7, mac 0 -> ops 7 * 0.1 = 0.7 pJ; acc_addr 4 -> addressing 0.4 pJ.
    # pJ/byte below 8 KiB is 2.5 * c / 8192: at 4000 B 1.220703125, at 40 B 0.01220703125, at 8 B 0.00244140625
    #   inout (8 + 4) * 1.220703125 = 14.6484375; params 24 * 0.01220703125 = 0.29296875;
    #   potential (16 + 16 + 8 + 8) * 0.00244140625 = 0.1171875; memory 15.05859375
    # total = 0.7 + 0.4 + 15.05859375 = 16.15859375 pJ
    model = tiny(nn.Linear)
    with Recorder(tmp_path / "trace", model=model) as recorder, recorder.stage("forward"):
        live = estimate_lemaire_energy(model, TINY_X)
    report = ours(tmp_path / "trace", strict=True)
    assert report.counts == {"synop": 4, "mac": 0, "ac": 7, "read_in_bytes": 8, "write_out_bytes": 4,
                             "read_params_bytes": 24, "read_potential_bytes": 24, "write_potential_bytes": 24,
                             "acc_addr": 4, "mac_addr": 0}
    assert report.buffer_sizes_bytes == {"inout_buffer_bytes": 4000, "params_buffer_bytes": 40,
                                         "potential_buffer_bytes": 8}
    expected = {"ops_pj": 0.7, "addressing_pj": 0.4, "memory_pj": 15.05859375, "inout_pj": 14.6484375,
                "params_pj": 0.29296875, "potential_pj": 0.1171875}
    for key, value in expected.items():
        assert close(report.breakdown_pj[key], value), key
    assert close(report.total_pj, 16.15859375)
    assert_report_equals(report, live)


# --- convention "qualia" ---------------------------------------------------------------------------

def test_hand_derived_qualia(tmp_path):
    # The same layer as a SpikingJelly StepModule (layer.Linear), T = 2 single-step calls on x.
    # Step 1: v = [1.5, 0.6] -> spikes [1, 0], v0 resets; step 2: v = [1.5, 1.2] -> spikes [1, 1].
    # Pooled rates: r_in = 4 / 8 = 0.5, r_out = 3 / 4 = 0.75. N_in = 4, N_out = 2.
    # theta_in = r_in * T * N_in = 4 spikes per inference; theta_out = r_out * T * N_out = 3.
    # ops  (adds) theta_in * N_out + T * N_out + theta_out = 8 + 4 + 3 = 15 -> 1.5 pJ (IF: no leak MAC)
    # addr (adds) r_in * T * N_out = 2 (Qualia's FC addressing; theta_in * N_out would be 8) -> 0.2 pJ
    # e_ram(n) = 1.09e-5 * n * 32 + 13.2: e(8) = 13.2027904, e(2) = 13.2006976, e(1000) = 13.5488
    # weights   theta_in * N_out = 8 reads at e(8 weights)           = 105.6223232
    # bias      T * N_out = 4 reads at e(2 biases)                    =  52.8027904
    # potential 2 * (theta_in * N_out + T * N_out) = 24 at e(2)       = 316.8167424
    # io        theta_in + theta_out = 7 at e(FIFO 1000)              =  94.8416
    # total = 1.5 + 0.2 + 105.6223232 + 52.8027904 + 316.8167424 + 94.8416 = 571.783456 pJ per inference
    model = tiny(layer.Linear)
    with Recorder(tmp_path / "trace", model=model) as recorder, recorder.stage("forward"), torch.no_grad():
        functional.reset_net(model)
        model(TINY_X)
        model(TINY_X)
    report = ours(tmp_path / "trace", preset="lemaire-qualia")  # T inferred: 2 calls after one reset
    assert report.config["timesteps"] == 2
    expected = {"ops_pj": 1.5, "addressing_pj": 0.2, "weights_pj": 105.6223232, "bias_pj": 52.8027904,
                "potential_pj": 316.8167424, "inout_pj": 94.8416, "params_pj": 158.4251136, "memory_pj": 570.083456}
    for key, value in expected.items():
        assert close(report.breakdown_pj[key], value), key
    assert close(report.total_pj, 571.783456)
    assert report.counts == {"ac": 15.0, "mac": 0.0, "mul": 0.0, "acc_addr": 2.0, "mac_addr": 0.0, "read_in": 4.0,
                             "write_out": 3.0, "read_weights": 8.0, "read_bias": 4.0, "read_potential": 12.0,
                             "write_potential": 12.0}


def record_oracle_case(path, name, keep_timesteps=True):
    model, x = oracle.build_model(name), oracle.build_input(name)
    assert oracle.digest(model, x) == GOLDEN["cases"][name]["digest"], "not the model Qualia costed"
    if not keep_timesteps:
        del model.timesteps  # then T comes from the neuron resets (single-step) or the [T, B] shape
    with Recorder(path, model=model) as recorder, recorder.stage("forward"):
        oracle.run_inference(model, x, GOLDEN["cases"][name]["step_mode"])


def qualia_preset(parameters):
    """lemaire-qualia at Qualia's mem_width / fifo_size; Qualia picks 0.03 / 0.2 pJ ops at 8 bits."""
    width = parameters["mem_width"]
    return load_preset("lemaire-qualia").derive({
        "qualia.mem_width": width, "snn_fifo_capacity_elements": parameters["fifo_size"],
        "e_add_pj": 0.03 if width == 8 else 0.1, "e_mul_pj": 0.2 if width == 8 else 3.1})


COMPONENTS = {"ops": "ops_pj", "addr": "addressing_pj", "mem_pot": "potential_pj", "mem_weights": "weights_pj",
              "mem_bias": "bias_pj", "mem_io": "inout_pj", "mem_total": "memory_pj"}


@pytest.mark.parametrize("name", list(GOLDEN["cases"]))
def test_qualia_golden(tmp_path, name):
    record_oracle_case(tmp_path / "trace", name)
    with open_trace(tmp_path / "trace") as trace:
        mapped = lemaire.activity(trace)  # mapped once, costed under every setting
    for label, setting in GOLDEN["cases"][name]["settings"].items():
        # strict: Qualia costs Flatten (0 pJ) where SpikingJelly's strict mode refuses the model
        report = lemaire.cost(mapped, qualia_preset(setting["parameters"]).costs(), strict=True)
        total = setting["total"]
        for component, key in COMPONENTS.items():
            assert close(report.breakdown_pj[key], total[component]), (label, component)
        assert close(report.total_pj, total["total"]), label
        # per layer, in graph order (Qualia's Flatten rows cost 0; a Linear/Conv never does)
        layers = [row for row in setting["layers"] if row["name"] != "Total" and row["total"] != 0]
        got = list(report.energy_by_module_component.values())
        assert len(got) == len(layers)
        for expected, components in zip(layers, got):
            for component in ("ops", "addr", "mem_pot", "mem_weights", "mem_bias", "mem_io"):
                assert close(components.get(component, 0.0), expected[component]), (label, expected["name"], component)


@pytest.mark.parametrize("name", ["cnn_analog", "cnn_lif_multistep"])
def test_qualia_timesteps_inferred_without_the_attribute(tmp_path, name):
    record_oracle_case(tmp_path / "trace", name, keep_timesteps=False)
    setting = GOLDEN["cases"][name]["settings"]["mem32_fifo1000"]
    report = ours(tmp_path / "trace", preset="lemaire-qualia")
    assert report.config["timesteps"] == GOLDEN["timesteps"]
    assert close(report.total_pj, setting["total"]["total"])


def test_one_activity_costs_both_conventions(tmp_path):
    """recost maps once; the two shipped presets cost it in their own conventions."""
    record_oracle_case(tmp_path / "trace", "cnn_if")
    with open_trace(tmp_path / "trace") as trace:
        frame = recost(trace, "lemaire", presets=["lemaire-spikingjelly", "lemaire-qualia"])
        spikingjelly = energy(trace, model="lemaire")  # the default preset is SpikingJelly's
    totals = frame[frame["breakdown"] == "total"].set_index("preset")["pj"]
    assert close(totals["lemaire-qualia"], GOLDEN["cases"]["cnn_if"]["settings"]["mem32_fifo1000"]["total"]["total"])
    assert close(totals["lemaire-spikingjelly"], spikingjelly.total_pj)
    assert spikingjelly.convention == "spikingjelly"
    # a sweep over Qualia's SRAM floor: without the 13.2 pJ floor only the size-dependent part is left
    with open_trace(tmp_path / "trace") as trace:
        swept = recost(trace, "lemaire", sweep={"qualia.ram_floor": [0.0, 13.2]}, base="lemaire-qualia")
    swept = swept[swept["breakdown"] == "total"].set_index("qualia.ram_floor")["pj"]
    assert close(swept[13.2], totals["lemaire-qualia"])
    assert swept[0.0] < swept[13.2] / 10


# --- presets, costs validation, options --------------------------------------------------------------

def strip_units(tree, prefix=""):
    """The TOML tree with each {value, unit} turned into the number in the unit lemaire declares."""
    import fnmatch

    from spiketrace.analyze.presets import convert

    out = {}
    for k, v in tree.items():
        key = prefix + k
        if isinstance(v, dict) and "value" in v:
            unit = next(u for pattern, u in lemaire.PRESET_UNITS.items() if fnmatch.fnmatchcase(key, pattern))
            out[k] = convert(v["value"], v["unit"], unit)
        else:
            out[k] = strip_units(v, key + ".") if isinstance(v, dict) else v
    return out


def test_presets_equal_spikingjelly_defaults():
    shipped = strip_units(tomllib.loads((PRESET_DIR / "lemaire-spikingjelly.toml").read_text())["parameters"])
    costs = lemaire.Costs.from_values(shipped)
    reference, config = LemaireEnergyCostConfig(), LemaireEnergyConfig()
    assert costs.e_add_pj == reference.e_add_pj
    assert costs.e_mul_pj == reference.e_mul_pj
    assert costs.memory_breakpoints == reference.memory_breakpoints
    assert costs.snn_fifo_capacity_elements == config.snn_fifo_capacity_elements
    assert costs.convention == "spikingjelly"
    assert load_preset("lemaire-spikingjelly").costs() == costs
    for capacity in (0, 100, 8192, 9000, 32768, 500_000, 1 << 20, 1 << 22):
        assert close(float(costs.memory_cost_pj(capacity)), reference.memory_cost_pj(capacity))
    qualia = load_preset("lemaire-qualia").costs()
    assert (qualia.convention, qualia.qualia_mem_width_bits, qualia.snn_fifo_capacity_elements) == ("qualia", 32, 1000)


@pytest.mark.parametrize("values, message", [
    ({"e_add": 0.1}, "unknown key 'e_add'"),
    ({"qualia": {"width": 8}}, "unknown key 'qualia.width'"),
    ({"e_mul_pj": -1.0}, "e_mul_pj must be finite and nonnegative"),
    ({"snn_fifo_capacity_elements": 0}, "snn_fifo_capacity_elements must be a positive integer"),
    ({"convention": "paper"}, "convention must be one of"),
    ({"memory_breakpoints": {"p0": {"capacity_bytes": 10, "pj_per_byte": 1}, "p1": {"capacity_bytes": 5,
                                                                                   "pj_per_byte": 2}}},
     "strictly increasing"),
    ({"memory_breakpoints": {"p0": {"capacity_bytes": 0, "pj_per_byte": 1}, "p2": {"capacity_bytes": 5,
                                                                                  "pj_per_byte": 2}}},
     "p0 .. p1"),
])
def test_costs_validation_names_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        lemaire.Costs.from_values(values)


def test_ignore_modules_drops_the_subtree(tmp_path):
    model = tiny(nn.Linear)
    with Recorder(tmp_path / "trace", model=model) as recorder, recorder.stage("forward"), torch.no_grad():
        model(TINY_X)
    report = ours(tmp_path / "trace", ignore_modules=["torch.nn.modules.linear.Linear"])
    # only the IF remains: ac = nnz(out) 1, potentials 8 B each, output write 4 B
    assert report.counts["synop"] == 0 and report.counts["ac"] == 1
    assert report.counts["read_potential_bytes"] == 8 and report.counts["write_out_bytes"] == 4
    with pytest.raises(TypeError, match="no options"):
        ours(tmp_path / "trace", nonsense=1)


def _resolve(path: str):
    """The class a qualified name names, or None: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name, None)
        return target
    return None


def test_every_class_path_the_analysis_matches_names_a_class():
    """The analysis matches modules by the class paths of their MRO; a path that names no class
    matches nothing, silently: the qualia convention looked for
    spikingjelly.activation_based.neuron.lif.ParametricLIFNode, which 2.0.0 defines in
    neuron.plif, so a PLIF layer lost its leak and reset terms (mlp_plif: 10129.78 pJ instead of
    Qualia's 10378.92, -2.4%). Every such literal in analyze/ must name a class of the installed
    torch 2.13 / SpikingJelly 2.0.0 (the versions our numbers are checked against)."""
    literal = re.compile(r"[\"']((?:spikingjelly|torch)\.(?:[a-z_0-9]+\.)+[A-Z]\w*)[\"']")
    root = Path(__file__).resolve().parent.parent / "analyze"
    found = {m.group(1): path.relative_to(root.parent) for path in root.rglob("*.py")
             for m in literal.finditer(path.read_text())}
    assert len(found) > 10
    labels = {"torch.nn.Conv3d"}  # the name SpikingJelly's NeuroMC refusal gives it, never matched against an MRO

    def names_itself(name):  # an MRO holds each class as module.qualname
        cls = _resolve(name)
        return isinstance(cls, type) and (f"{cls.__module__}.{cls.__qualname__}" == name or name in labels)

    assert {name: str(where) for name, where in found.items() if not names_itself(name)} == {}
