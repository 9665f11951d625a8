"""The spikesim model equals SpikingJelly 2.0.0's estimate_spikesim_energy on the same run,
and SpikeSim's own code (ela_spikesim.py, c2627bc) on its published VGG9 configuration.

SpikingJelly's counter runs value probes (is_binary_tensor, tile sums) inside its dispatch
mode, and those reach any recorder below it on the mode stack; so each comparison builds
the same seeded eval-mode model twice, once for SpikingJelly's estimator and once under our
Recorder (both forwards under no_grad, as estimate_spikesim_energy runs them). On CPU the
two runs are bit-identical.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib

import pytest
import torch
import torch.nn.functional as F
from spikingjelly.activation_based import functional, layer, neuron
from spikingjelly.activation_based.op_counter import (
    SpikeSimEnergyConfig,
    SpikeSimEnergyProfiler,
    estimate_spikesim_energy,
)
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import energy, load_preset, recost, spikesim
from spiketrace.analyze.energy.spikesim import Costs
from spiketrace.analyze.presets import PRESET_DIR
from spiketrace.capture import Recorder
from tests.zoo import CASES
from tests.zoo import build as build_zoo

T = 4


class SingleStep(nn.Module):
    """Three convs over T steps: 70 mid channels (two crossbar tiles at 64, nine at 8, the
    last one partial), stride 2 with padding, then dilation 2 without padding."""

    def __init__(self, c_in=3):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, 70, 3, padding=1)
        self.sn1 = neuron.IFNode()
        self.conv2 = nn.Conv2d(70, 9, 3, stride=2, padding=1)
        self.sn2 = neuron.LIFNode(tau=2.0)
        self.conv3 = nn.Conv2d(9, 5, 2, dilation=2, bias=False)
        self.sn3 = neuron.IFNode()

    def forward(self, x):
        return torch.stack([self.sn3(self.conv3(self.sn2(self.conv2(self.sn1(self.conv1(x[t]))))))
                            for t in range(x.shape[0])])


class MultiStep(nn.Module):
    """step_mode='m': the convolutions see [T*N, C, H, W]."""

    def __init__(self):
        super().__init__()
        self.conv1 = layer.Conv2d(2, 12, 3, stride=2, padding=2)
        self.sn1 = neuron.LIFNode(tau=2.0)
        self.conv2 = layer.Conv2d(12, 6, 3, padding=1, padding_mode="zeros")
        self.sn2 = neuron.IFNode()
        functional.set_step_mode(self, "m")

    def forward(self, x):
        return self.sn2(self.conv2(self.sn1(self.conv1(x))))


def _spikes(*shape, p=0.35, seed=1):
    return (torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < p).float()


NETS = {
    "single_step_spikes": (SingleStep, lambda: _spikes(T, 2, 3, 7, 7)),
    "single_step_analog": (SingleStep, lambda: torch.rand(T, 2, 3, 7, 7, generator=torch.Generator().manual_seed(2))),
    "multi_step": (MultiStep, lambda: _spikes(T, 2, 2, 6, 6)),
}
CONFIGS = [{"activity_mode": m, "device": d, "xbar_size": b} for m in ("dense", "event") for d in ("rram", "sram")
           for b in (64, 8)]


def build(name):
    net, inputs = NETS[name]
    torch.manual_seed(0)
    model = net().eval()
    with torch.no_grad():  # larger weights, so every layer spikes
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                module.weight.mul_(3.0)
    return model, inputs()


def record(path, model, x, keep=True, no_grad=True):
    with Recorder(path, model=model, keep_binary_inputs=keep) as recorder, recorder.stage("forward"):
        if no_grad:
            with torch.no_grad():
                model(x)
        else:
            model(x)
    return path


def close(got, expected):
    assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9), (got, expected)


def assert_same(got, expected):
    """Every field of SpikingJelly's report: integers exactly, floats to 1e-9."""
    assert got.event_stats_by_stage == expected.event_stats_by_stage
    assert got.stage_metadata == expected.stage_metadata
    assert got.counts == expected.counts
    assert got.warnings == expected.warnings
    assert got.model_info == dataclasses.asdict(expected.model_info)
    assert got.config.spikingjelly() == dataclasses.asdict(expected.config)
    close(got.energy_total_pj, expected.energy_total_pj)
    assert list(got.energy_by_stage) == list(expected.energy_by_stage)
    for stage, value in expected.energy_by_stage.items():
        close(got.energy_by_stage[stage], value)
    for stage, components in expected.energy_by_component["by_stage"].items():
        assert got.energy_by_component["by_stage"][stage].keys() == components.keys()
        for key, value in components.items():
            close(got.energy_by_component["by_stage"][stage][key], value)
    assert got.breakdown_pj.keys() == expected.breakdown_pj.keys()
    for key, value in expected.breakdown_pj.items():
        close(got.breakdown_pj[key], value)
        close(got.energy_by_component["totals"][key], value)


def spikingjelly(model, x, strict=True, **config):
    return estimate_spikesim_energy(model, x, config=SpikeSimEnergyConfig(**config), strict=strict)


@pytest.mark.parametrize("name", list(NETS))
def test_equals_spikingjelly_dense_and_event_rram_and_sram_two_crossbar_sizes(tmp_path, name):
    path = record(tmp_path / "trace", *build(name))
    expected = [spikingjelly(*build(name), **config) for config in CONFIGS]
    assert any(e.counts["stage_count"] == 3 for e in expected) or name == "multi_step"
    with open_trace(path) as trace:
        mapped = spikesim.activity(trace)  # one mapping, every configuration costed from it
        for config, want in zip(CONFIGS, expected):
            assert_same(spikesim.cost(mapped, Costs(**config)), want)
            assert_same(spikesim.cost(mapped, Costs(**config), compat="spikingjelly", strict=True), want)
        assert_same(energy(trace, "spikesim", overrides=["activity_mode=event", "xbar_size=8"]), expected[-3])
        # recost: one mapping, eight costings (two crossbar sizes of spike maps unpacked)
        swept = recost(trace, "spikesim", sweep={k: sorted({c[k] for c in CONFIGS}) for k in CONFIGS[0]})
    totals = swept[swept["key"] == "energy_total_pj"]
    assert len(totals) == len(CONFIGS)
    for config, want in zip(CONFIGS, expected):
        row = totals[(totals["activity_mode"] == config["activity_mode"]) & (totals["device"] == config["device"])
                     & (totals["xbar_size"] == config["xbar_size"])]
        close(float(row["pj"].iloc[0]), want.energy_total_pj)
    event_stats = [e.event_stats_by_stage for c, e in zip(CONFIGS, expected) if c["activity_mode"] == "event"]
    if name != "single_step_analog":  # spikes make event mode cheaper than dense, for real
        assert any(s["active_row_count"] < s["dense_row_count"] for stats in event_stats for s in stats.values())


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("conv_geometry", "sew", "multistep")],
                         ids=lambda c: c.name)
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_unsupported_layers_warn_like_spikingjelly_and_strict_refuses_like_it(tmp_path, case, train):
    """Grouped/depthwise convs, a PLIF neuron, BN, pooling, Linear, a training model."""
    def fresh():
        model, x = build_zoo(case)
        return model.train(train), x
    path = record(tmp_path / "trace", *fresh())
    with open_trace(path) as trace:
        for config in ({}, {"activity_mode": "event", "xbar_size": 2}):
            overrides = [f"{k}={v}" for k, v in config.items()]
            assert_same(energy(trace, "spikesim", overrides=overrides, compat="spikingjelly"),
                        spikingjelly(*fresh(), strict=False, **config))
            ours = energy(trace, "spikesim", overrides=overrides)
            try:
                spikingjelly(*fresh(), strict=True, **config)
                refused = None
            except (ValueError, NotImplementedError) as problem:
                refused = problem
            if refused is None:
                energy(trace, "spikesim", overrides=overrides, strict=True)
            else:
                with pytest.raises(type(refused)) as raised:
                    energy(trace, "spikesim", overrides=overrides, strict=True)
                assert str(raised.value) == str(refused)
        # by default nothing is refused: the rest is costed, the refused layers listed with their volume
        listed = {(u["kind"], u["scope"]) for u in ours.unsupported}
        linears = trace.sql("SELECT count(*) AS n FROM modules WHERE class_name = 'Linear'")["n"].iloc[0]
        assert sum(kind == "linear" for kind, _ in listed) == linears
        assert all(u["calls"] > 0 for u in ours.unsupported if u["kind"] != "neuron")
    if case.name == "conv_geometry":
        assert ("conv", "ConvGeometry.conv2") in listed and ("conv", "ConvGeometry.depthwise") in listed
        macs = {u["scope"]: u["macs"] for u in ours.unsupported}
        # depthwise: out (2, 4, 5, 5) = 200 outputs, each reading 1 channel x 3 x 3 taps
        assert macs["ConvGeometry.depthwise"] == 200 * 9
        # fc: Linear(4, 3) on a batch of 2: 6 outputs x 4 inputs
        assert macs["ConvGeometry.fc"] == 6 * 4
    if case.name == "multistep":
        assert ("neuron", "MultiStep.plif") in listed


def test_hand_derived_tiny_conv(tmp_path):
    """Conv2d(2, 3, 3, padding=1) on x(1, 2, 4, 4) with two spikes: channel 0 at (0, 0) and
    channel 1 at (3, 3). Output 4 x 4, so sites = N*Ho*Wo = 16.

    Constants (SpikeSim / SpikingJelly defaults, rram): patch_control(b) = htree 157.12 +
    mem_fetch 4.64 + tile_buffer 397 + (b/8)*16*sub 1.15e-6 + (b/8)*temp 0.2
    + (b/8)^2 * (adc 2.03084 + mux 0.094245); neuron 5.096; xbar 1.76423.
    b = 64: patch_control = 558.76 + 0.0001472 + 1.6 + 64 * 2.125085 = 696.3655872
            pe_cycle(3x3) = 696.3655872 + 5.096 + 8 * 9 * 1.76423 = 828.4861472
    b = 1:  patch_control = 558.76 + 0.0000023 + 0.025 + 2.125085 / 64 = 558.818206753125
            pe_cycle(3x3) = 558.818206753125 + 5.096 + (1/8) * 9 * 1.76423 = 565.898965503125

    Dense, b = 64: pe_cycles = ceil(2/64) * ceil(3/64) * 16 = 16 -> 16 * 828.4861472 = 13255.7783552 pJ.
    Dense, b = 1:  pe_cycles = 2 * 3 * 16 = 96 -> 96 * 565.898965503125 = 54326.300688300 pJ.
    Event, b = 64 (one tile of both channels, q = p = 1): the spike at (0, 0) lies in the
      3 x 3 patches of outputs (0,0), (0,1), (1,0), (1,1), the one at (3, 3) in those of
      (2,2), (2,3), (3,2), (3,3): A = 8 active patches, R = 8 rows, Z = q * 8 = 8 sites.
      patch = 1 * 8 * 696.3655872 = 5570.9246976; xbar = 1 * 8 * (1.76423 / 8) * (64 / 2)
      = 56.45536 (a tile of 2 channels pads to 64 rows); neuron = 1 * 8 * 5.096 = 40.768;
      total 5668.1480576 pJ.
    Event, b = 1 (a tile per channel, q = 3 output tiles, p = 2): A = 4 + 4 = 8,
      R = [4, 4], Z = 3 * 8 = 24. patch = 3 * 8 * 558.818206753125 = 13411.636962075;
      xbar = 3 * (4 + 4) * (1.76423 / 8) = 5.29269; neuron = 2 * 24 * 5.096 = 244.608;
      total 13661.537652075 pJ.
    """
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), neuron.IFNode()).eval()
    x = torch.zeros(1, 2, 4, 4)
    x[0, 0, 0, 0] = 1.0
    x[0, 1, 3, 3] = 1.0
    with open_trace(record(tmp_path / "trace", model, x)) as trace:
        def total(**config):
            return energy(trace, "spikesim", overrides=[f"{k}={v}" for k, v in config.items()])
        close(total().energy_total_pj, 13255.7783552)
        close(total(xbar_size=1).energy_total_pj, 54326.300688300)
        event = total(activity_mode="event")
        close(event.energy_total_pj, 5668.1480576)
        assert event.breakdown_pj.keys() == {"patch_control_pj", "xbar_pj", "neuron_pj"}
        close(event.breakdown_pj["patch_control_pj"], 5570.9246976)
        close(event.breakdown_pj["xbar_pj"], 56.45536)
        close(event.breakdown_pj["neuron_pj"], 40.768)
        one = total(activity_mode="event", xbar_size=1)
        assert one.event_stats_by_stage["Sequential.0"]["active_row_count_by_tile"] == [4, 4]
        assert one.event_stats_by_stage["Sequential.0"]["active_output_tile_site_count"] == 24
        close(one.energy_total_pj, 13661.537652075)


class VGG9Conv(nn.Module):
    """SpikeSim's VGG9 conv stack (in_ch, out_ch, in_dim, out_dim lists of ela_spikesim.py),
    with a stride-2 conv where VGG9 pools, so each conv's output size is SpikeSim's out_dim."""

    def __init__(self):
        super().__init__()
        spec = [(3, 64, 1), (64, 64, 2), (64, 128, 1), (128, 128, 2), (128, 256, 1), (256, 256, 1), (256, 256, 2)]
        self.convs = nn.ModuleList(nn.Conv2d(i, o, 3, stride=s, padding=1) for i, o, s in spec)
        self.neurons = nn.ModuleList(neuron.IFNode() for _ in spec)

    def forward(self, x):
        for t in range(x.shape[0]):
            y = x[t]
            for conv, sn in zip(self.convs, self.neurons):
                y = sn(conv(y))
        return y


def test_vgg9_cifar10_t5_reproduces_spikesim_energy_area_latency(tmp_path):
    """SpikeSim ela_spikesim.py (c2627bc) on VGG9 / CIFAR-10, T = 5, 64 x 64 RRAM, 8 PEs per
    tile, 250 MHz, batch 1 prints 15,906,934.026 pJ, 8,425,528.76 um2 and 62.8 ms.

    Lists: in_ch [3,64,64,128,128,256,256], out_ch [64,64,128,128,256,256,256],
    in_dim [32,32,16,16,8,8,8], out_dim [32,16,16,8,8,8,4].
    Energy: sum ceil(in/64)*ceil(out/64)*out_dim^2 = 1024 + 256 + 2*256 + 4*64 + 8*64 + 16*64
      + 16*16 = 3840 PE cycles per step; * T 5 * 828.4861472 pJ = 15,906,934.02624 pJ.
    Area (um2): PE = 9 * 26.2144 + 8 * (693.633 + 45.9) = 6152.1936; PEs = 1+1+2+4+8+16+16 = 48,
      tiles = 48 / 8 = 6; tile = 8 * 13411.41498 + 484.643999 + 0.7391 * 8192 + 8 * PE + 433660;
      input buffer = sum in_ch * in_dim^2 = 158720 elements, neuron memory = the first five
      layers' out_ch * out_dim^2 = 139264 elements, each 0.7391 * 22 um2.
    Latency: outputs per step O = out_ch * out_dim^2 = [65536, 16384, 32768, 8192, 16384, 16384,
      4096]; the last layer halts at T * (O_7 + sum_{i<7} int(0.75 * O_i)) = 5 * (4096 + 116736)
      = 604160 PE cycles of 26 clocks at 250 MHz (104 ns): 62,832,640 ns.
    """
    def fresh():
        torch.manual_seed(0)
        model = VGG9Conv().eval()
        with torch.no_grad():  # dense mode does not depend on weights; event mode needs spikes
            for conv in model.convs:
                conv.weight.mul_(4.0)
        return model, torch.rand(5, 1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    path = record(tmp_path / "trace", *fresh())
    with open_trace(path) as trace:
        report = energy(trace, "spikesim", "spikesim-rram-64")
        event = energy(trace, "spikesim", "spikesim-rram-64", overrides=["activity_mode=event"])
    # event mode over 64..256 channels (up to four crossbar tiles), against SpikingJelly
    assert_same(event, spikingjelly(*fresh(), activity_mode="event"))
    assert event.energy_total_pj < report.energy_total_pj
    close(report.energy_total_pj, 3840 * 5 * 828.4861472)
    assert f"{report.energy_total_pj:,.3f}" == "15,906,934.026"
    per_layer = [1024, 256, 512, 256, 512, 1024, 256]
    for (_stage, pj), cycles in zip(report.energy_by_stage.items(), per_layer):
        close(pj, cycles * 5 * 828.4861472)
    pe = 9 * 26.2144 + 8 * (693.633 + 45.9)
    tile = 8 * 13411.41498 + 484.643999 + 0.7391 * 64 * 128 + 8 * pe + 216830 * 2
    area_um2 = 6 * tile + (158720 + 139264) * 0.7391 * 22
    close(report.area_mm2, area_um2 / 1e6)
    assert round(report.area_mm2, 2) == 8.43 and f"{area_um2:,.2f}" == "8,425,528.76"
    assert report.latency_detail["cycles"] == 604160
    close(report.latency_ms, 604160 * 26 * (1000 / 250) / 1e6)
    assert round(report.latency_ms, 1) == 62.8
    assert_same(report, spikingjelly(*fresh()))  # SpikingJelly's dense mode agrees, layer by layer


class TwoCallConv(nn.Conv2d):
    """One Conv2d module that convolves twice: with its 3x3 weight, then with the 1x1 centre
    tap of channel 0 only. SpikingJelly records both under one stage."""

    def forward(self, x):
        return super().forward(x) + F.conv2d(x[:, :1], self.weight[:, :1, 1:2, 1:2])


def test_stage_with_inconsistent_shapes_costs_each_call_with_its_own_geometry(tmp_path):
    """x(1, 2, 4, 4), weight (3, 2, 3, 3), padding 1, then the (3, 1, 1, 1) slice on channel 0.
    Each call has 16 output sites and one PE (p = q = 1 at b = 64), so 16 PE cycles each.
    SpikingJelly prices the stage's 32 cycles at its first call's 3x3 PE cycle:
      32 * 828.4861472 = 26511.5567104 pJ.
    Ours prices the 1x1 call at the 1x1 PE cycle 696.3655872 + 5.096 + 8 * 1 * 1.76423
      = 715.5754272 pJ: 16 * 828.4861472 + 16 * 715.5754272 = 24704.9851904 pJ."""
    def fresh():
        torch.manual_seed(0)
        model = nn.Sequential(TwoCallConv(2, 3, 3, padding=1), neuron.IFNode()).eval()
        return model, _spikes(1, 2, 4, 4, p=0.5)
    with open_trace(record(tmp_path / "trace", *fresh())) as trace:
        assert_same(energy(trace, "spikesim", compat="spikingjelly"), spikingjelly(*fresh(), strict=False))
        # event mode at b = 1: 2 input tiles, then 1; SpikingJelly's per-tile sum turns None and
        # its get_report() fails; compat fails alike, the default costs each call
        with pytest.raises(ValueError, match="both be present or both be absent") as refused:
            spikingjelly(*fresh(), strict=False, activity_mode="event", xbar_size=1)
        with pytest.raises(ValueError, match=str(refused.value)):
            energy(trace, "spikesim", overrides=["activity_mode=event", "xbar_size=1"], compat="spikingjelly")
        per_call = energy(trace, "spikesim", overrides=["activity_mode=event", "xbar_size=1"])
        assert per_call.event_stats_by_stage["Sequential.0"]["active_row_count_by_tile"] is None
        ours = energy(trace, "spikesim")
        with pytest.raises(NotImplementedError, match="inconsistent shapes"):
            energy(trace, "spikesim", strict=True)
    close(spikingjelly(*fresh(), strict=False).energy_total_pj, 26511.5567104)
    close(ours.energy_total_pj, 16 * 828.4861472 + 16 * 715.5754272)
    close(ours.energy_total_pj, 24704.9851904)
    assert "each call is costed with its own geometry" in ours.warnings[0]


def test_grad_enabled_eval_forward_is_costed_unless_compat(tmp_path):
    """A forward recorded in eval mode without no_grad: SpikingJelly's profiler (used without
    no_grad) refuses every conv; by default we cost it as the inference it computes."""
    model, x = build("single_step_spikes")
    with open_trace(record(tmp_path / "trace", model, x, no_grad=False)) as trace:
        ours = energy(trace, "spikesim")
        compat = energy(trace, "spikesim", compat="spikingjelly")
        with pytest.raises(NotImplementedError, match="forward inference stages"):
            energy(trace, "spikesim", strict=True)
    model, x = build("single_step_spikes")
    profiler = SpikeSimEnergyProfiler(strict=False)
    with profiler:
        model(x)
    assert_same(compat, profiler.get_report())
    assert compat.energy_total_pj == 0.0
    assert_same(dataclasses.replace(ours, warnings=ours.warnings[:0]), spikingjelly(*build("single_step_spikes")))
    assert "grad enabled" in ours.warnings[0]


def test_event_mode_without_packed_inputs_says_which_capture_setting(tmp_path):
    with open_trace(record(tmp_path / "trace", *build("single_step_spikes"), keep=False)) as trace:
        dense = energy(trace, "spikesim")
        with pytest.raises(ValueError, match=r"keep_binary_inputs=True") as raised:
            energy(trace, "spikesim", overrides=["activity_mode=event"])
    assert "packed_inputs" in str(raised.value)
    assert_same(dense, spikingjelly(*build("single_step_spikes")))


def test_ignored_module_and_stage_selection(tmp_path):
    with open_trace(record(tmp_path / "trace", *build("single_step_spikes"))) as trace:
        full = energy(trace, "spikesim", overrides=["activity_mode=event"])
        rest = energy(trace, "spikesim", overrides=["activity_mode=event"], ignore_modules=["SingleStep.conv2"])
        staged = energy(trace, "spikesim", overrides=["activity_mode=event"], stage="forward")
        other = energy(trace, "spikesim", stage="no-such-stage")
    assert list(rest.energy_by_stage) == ["SingleStep.conv1", "SingleStep.conv3"]
    assert staged.energy_by_stage == full.energy_by_stage
    assert other.energy_total_pj == 0.0 and other.warnings[-1].startswith("No supported Conv2d")
    close(rest.energy_total_pj, full.energy_total_pj - full.energy_by_stage["SingleStep.conv2"])


def _strip(tree):
    return {k: (_strip(v) if "value" not in v else v["value"]) if isinstance(v, dict) else v for k, v in tree.items()}


@pytest.mark.parametrize("device", ["rram", "sram"])
def test_shipped_presets_are_spikingjelly_defaults_and_spikesim_constants(device):
    document = tomllib.loads((PRESET_DIR / f"spikesim-{device}-64.toml").read_text())
    costs = Costs.from_values(_strip(document["parameters"]))
    expected = dataclasses.asdict(SpikeSimEnergyConfig(device=device))
    for name, value in expected.items():
        assert getattr(costs, name) == value, name
    assert load_preset(f"spikesim-{device}-64").costs() == costs
    # ela_spikesim.py compute_area / latency_gen constants
    area = costs.area
    assert (area.rram_xbar_um2, area.sram_xbar_um2, area.adc_um2, area.mux_um2) == (26.2144, 671.089, 693.633, 45.9)
    assert (area.sub_um2, area.temp_buffer_um2, area.htree_um2) == (13411.41498, 484.643999, 216830 * 2)
    assert area.sram_bit_um2 * area.tile_buffer_bits == 0.7391 * 64 * 128
    assert (area.pe_per_tile, area.buffer_bits_per_element, area.neuron_memory_layers) == (8, 22, 5)
    assert costs.latency.pe_cycle_clocks * 1000 / costs.latency.clock_mhz == 26 * (1000 / 250)


@pytest.mark.parametrize("values, message", [
    ({"xbar_sise": 64}, "unknown key 'xbar_sise'"),
    ({"area": {"adc": 1.0}}, "unknown key 'area.adc'"),
    ({"xbar_size": 0}, "xbar_size must be an integer >= 1"),
    ({"xbar_size": 2.5}, "xbar_size must be an integer"),
    ({"device": "flash"}, "device must be 'rram' or 'sram'"),
    ({"activity_mode": "sparse"}, "activity_mode must be 'dense' or 'event'"),
    ({"adc_pj": -1.0}, "adc_pj must be finite and nonnegative"),
    ({"latency": {"clock_mhz": 0}}, "latency.clock_mhz must be finite and positive"),
    ({"area": {"pe_per_tile": 0}}, "area.pe_per_tile must be an integer >= 1"),
])
def test_bad_values_are_refused_naming_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        Costs.from_values(values)
