"""The paper convention (analyze/energy/paper.py, `spiketrace energy --model paper`): every
number derived by hand on small models of our own, in both modes and under every option;
event mode equal to NeuroBench 2.3.0's Effective_ACs x samples run live; the arithmetic of
published rows; the spread over a test set; the CLI in every format.

E = E_MAC x MACs + E_AC x SOPs with E_MAC 4.6 pJ, E_AC 0.9 pJ (paper-fp32-45nm) unless said.
"""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import energy, load_preset, recost
from spiketrace.analyze.energy.paper import Costs, activity_of_counts, cost, energy_pj
from spiketrace.analyze.energy.spread import spread, t_975
from spiketrace.capture import Recorder, record_inference, schedule
from tests.neurobench_models import CASES, NeuroBenchCase, capture, run_neurobench


class Heaviside(nn.Module):
    """A stateless spiking neuron: 1 where the input reaches 0.5."""

    def forward(self, x):
        return (x >= 0.5).float()


def _set(layer: nn.Module, weight, bias=None) -> nn.Module:
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))
        if bias is not None:
            layer.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))
    return layer


def paper(path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return energy(path, "paper", **options)


def layer(report, scope, index=1):
    rows = report.layers[(report.layers["scope"] == scope) & (report.layers["index"] == index)]
    assert len(rows) == 1, report.layers
    return rows.iloc[0]


# -- a conv with padding and stride, then a conv over its spikes ---------------------------------------
class StridedConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv0 = _set(nn.Conv2d(1, 1, 3, stride=2, padding=1, bias=False), torch.ones(1, 1, 3, 3))
        self.sn = Heaviside()
        self.conv1 = _set(nn.Conv2d(1, 2, 3, padding=1, bias=False), torch.ones(2, 1, 3, 3))

    def forward(self, x):
        return self.conv1(self.sn(self.conv0(x)))


def test_a_conv_with_padding_and_stride(tmp_path):
    # x: one 4x4 image of 0.1 (not spikes). conv0 (ones, 3x3, stride 2, padding 1) -> 2x2: output
    #   (0,0) sees inputs rows 0..1 x cols 0..1 (4 values) = 0.4; (0,1) and (1,0) see 2x3 = 0.6;
    #   (1,1) sees 3x3 = 0.9. Dense MACs (padding included, as papers count them):
    #   out numel 4 x C_in 1 x 9 taps = 36, charged as the first layer's MACs.
    # sn (>= 0.5): spikes at (0,1), (1,0), (1,1): 3 of 4, rate 0.75.
    # conv1 (ones, 3x3, padding 1, 2 channels) over the 2x2 spikes: dense 2x2 out x 2 ch x 9 = 72.
    #   rate mode: 0.75 x 72 = 54 SOPs.
    #   event mode: a spike at p meets the (output, tap) pairs with o + k - 1 = p: 2 per dim, 4 in 2-D,
    #   x 2 channels = 8 pairs per spike (the padding taps meet nothing): 3 x 8 = 24 SOPs.
    path = record_inference(tmp_path / "t", StridedConv(), torch.full((1, 1, 4, 4), 0.1))
    rate, event = paper(path), paper(path, mode="event")
    for report, sops in ((rate, 54.0), (event, 24.0)):
        first, second = layer(report, "StridedConv.conv0"), layer(report, "StridedConv.conv1")
        assert (first["kind"], first["input"], first["first"], first["dense_mac"], first["mac"], first["sop"]) == \
            ("conv", "non-spike", True, 36.0, 36.0, 0.0)
        assert (second["input"], second["dense_mac"], second["sop"], second["mac"]) == ("spike", 72.0, sops, 0.0)
        assert second["input_firing_rate"] == 0.75
        assert report.totals["energy_pj"] == pytest.approx(4.6 * 36 + 0.9 * sops)
        assert report.samples == 1 and report.per_sample["energy_mj"] == pytest.approx((4.6 * 36 + 0.9 * sops) * 1e-9)
    # once: the first layer ran once per batch, so it is charged as recorded (and the notes say so)
    once = paper(path, first_layer="once")
    assert layer(once, "StridedConv.conv0")["mac"] == 36.0 and any("once per batch" in n for n in once.warnings)
    # int32 preset, 3.1 / 0.1
    assert paper(path, preset="paper-int32-45nm").totals["energy_pj"] == pytest.approx(3.1 * 36 + 0.1 * 54)


# -- a SEW-style residual: the sum of spikes is not binary ------------------------------------------------
class SEWBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = _set(nn.Linear(4, 4, bias=False), torch.eye(4))
        self.sn = Heaviside()
        self.fc2 = _set(nn.Linear(4, 2, bias=False), [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0]])

    def forward(self, x):
        return self.fc2(self.sn(self.fc1(x)) + x)  # SEW ADD: spikes + spikes


def test_a_sew_residual_whose_sum_is_not_binary(tmp_path):
    # x = [1, 0, 1, 1] (spikes, rate 3/4): fc1 (identity, dense 1 x 4 x 4 = 16) is the first layer,
    #   but its input is spikes: SOPs. rate: 3/4 x 16 = 12; event: sum_k nnz(x_k) nnz(W_k) = 3 x 1 = 3.
    # s = sn(fc1 x) = x; s + x = [2, 0, 2, 2]: not spikes. fc2 (dense 1 x 4 x 2 = 8) reads it:
    #   non_spike=mac: 8 MACs (both modes); non_spike=omit: left out (0), its dense MACs still shown.
    path = record_inference(tmp_path / "t", SEWBlock(), torch.tensor([[1.0, 0.0, 1.0, 1.0]]))
    cases = {("rate", "mac"): (12, 8), ("event", "mac"): (3, 8), ("rate", "omit"): (12, 0), ("event", "omit"): (3, 0)}
    for (mode, non_spike), (sops, macs) in cases.items():
        report = paper(path, mode=mode, non_spike=non_spike)
        fc1, fc2 = layer(report, "SEWBlock.fc1"), layer(report, "SEWBlock.fc2")
        assert (fc1["input"], fc1["first"], fc1["sop"], fc1["mac"]) == ("spike", True, sops, 0)
        assert (fc2["input"], fc2["dense_mac"], fc2["mac"], fc2["sop"]) == ("non-spike", 8, macs, 0)
        assert fc2["charged"] == ("mac" if non_spike == "mac" else "omitted")
        assert math.isnan(fc2["input_firing_rate"])
        assert report.totals["energy_pj"] == pytest.approx(0.9 * sops + 4.6 * macs), (mode, non_spike)
        assert report.convention["non_spike"] == non_spike
    assert any("left out" in note for note in paper(path, non_spike="omit").warnings)


# -- a spiking MLP over several time steps (single-step neurons, the same image each step) -------------
class IF(nn.Module):
    """Integrate-and-fire, threshold 1, reset by subtraction; state kept between calls."""

    def __init__(self) -> None:
        super().__init__()
        self.v = None

    def forward(self, x):
        self.v = x if self.v is None else self.v + x
        spike = (self.v >= 1.0).float()
        self.v = self.v - spike
        return spike


class MLP(nn.Module):
    def __init__(self, steps: int = 3) -> None:
        super().__init__()
        self.steps = steps
        self.fc1 = _set(nn.Linear(3, 4), torch.zeros(4, 3), [0.5, 1.0, 0.0, 0.25])
        self.sn = IF()
        self.fc2 = _set(nn.Linear(4, 2), [[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]], [0.0, 0.0])

    def forward(self, x):
        self.sn.v = None
        return sum(self.fc2(self.sn(self.fc1(x))) for _ in range(self.steps))


MLP_X = torch.tensor([[0.3, 0.7, 2.0], [1.5, 0.2, 0.9]])


def test_a_spiking_mlp_over_time_steps(tmp_path):
    # x [2, 3] (not spikes) enters fc1 at each of T = 3 steps: fc1 is the first layer, 3 calls of
    #   dense 2 x 3 x 4 = 24 MACs: per-step 72 MACs; once: 72 / 3 (its calls per batch) = 24.
    # fc1's weights are 0, so its output is its bias [0.5, 1, 0, 0.25] at every step, for both samples.
    #   IF (threshold 1, subtract): neuron 0: 0.5, 1.0 (spike), 0.5 -> 1 spike; neuron 1 spikes at every
    #   step -> 3; neurons 2, 3 never. Over the run: nnz 2 x (1 + 3) = 8 of 3 x 2 x 4 = 24: rate 1/3.
    # fc2: 3 calls of dense 2 x 4 x 2 = 16 -> 48. rate: 1/3 x 48 = 16 SOPs.
    #   event: sum_k nnz(s_k) nnz(W_k): features 0, 1 spike 2 and 6 times; W's columns 0, 1 hold 2
    #   and 1 nonzeros: 2 x 2 + 6 x 1 = 10 SOPs.
    # samples: the model's first input, dim 0: 2.
    path = record_inference(tmp_path / "t", MLP(), MLP_X)
    expected = {("rate", "per-step"): (72, 16), ("event", "per-step"): (72, 10),
                ("rate", "once"): (24, 16), ("event", "once"): (24, 10)}
    for (mode, first_layer), (macs, sops) in expected.items():
        report = paper(path, mode=mode, first_layer=first_layer)
        fc1, fc2 = layer(report, "MLP.fc1"), layer(report, "MLP.fc2")
        assert (fc1["calls"], fc1["dense_mac"], fc1["mac"], fc1["charged"]) == (3, 72, macs, "first")
        assert (fc2["calls"], fc2["dense_mac"], fc2["sop"]) == (3, 48, sops)
        assert fc2["input_firing_rate"] == pytest.approx(1 / 3)
        assert report.samples == 2
        assert report.per_sample["mac"] == macs / 2 and report.per_sample["sop"] == sops / 2
        assert report.per_sample["energy_pj"] == pytest.approx((4.6 * macs + 0.9 * sops) / 2)
    once = paper(path, first_layer="once")
    assert once.convention["time_steps"] == 3 and once.convention["time_steps_source"] == "the first layer's calls per batch"
    given = paper(path, first_layer="once", time_steps=4, samples=8)  # 72 / 4; divided by the 8 samples given
    assert layer(given, "MLP.fc1")["mac"] == 18 and given.per_sample["mac"] == 18 / 8
    assert given.convention["samples_source"] == "given"


# -- a spike-driven attention block: spike Q @ spike K^T ----------------------------------------------
class SpikeAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = _set(nn.Linear(4, 4, bias=False), torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0])))
        self.k = _set(nn.Linear(4, 4, bias=False), torch.eye(4))
        self.v = _set(nn.Linear(4, 4, bias=False), torch.eye(4))
        self.sn = Heaviside()

    def forward(self, x):
        q, k, v = self.sn(self.q(x)), self.sn(self.k(x)), self.sn(self.v(x))
        return (q @ k.transpose(-2, -1)) @ v


ATTENTION_X = torch.tensor([[[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]]])  # [B 1, N 2, d 4], nnz 5 of 8


def test_a_spike_driven_attention_block(tmp_path):
    # x: nnz 5 of 8 (rate 5/8); its columns hold 2, 1, 1, 1 spikes.
    # q, k, v (Linear 4 -> 4, dense 2 x 4 x 4 = 32 each): rate 5/8 x 32 = 20 SOPs each.
    #   event: sum_k nnz(x_k) nnz(W_k): q's W = diag(1, 1, 0, 0): 2 + 1 = 3; k and v (identity): 5.
    # q = [[1, 1, 0, 0], [1, 0, 0, 0]] (nnz 3, rate 3/8), k = v = x (rate 5/8).
    # scores = q @ k^T = [[2, 1], [1, 1]] (bmm, dense N 2 x d 4 x N 2 = 16): spike x spike.
    #   rate: left (q) 3/8 x 16 = 6; right (k^T) 5/8 x 16 = 10; both 3/8 x 5/8 x 16 = 3.75.
    #   event: the pairs where both are 1 = sum(q @ k^T) = 5.
    # out = scores @ v (dense N 2 x N 2 x d 4 = 16): scores hold a 2, not spikes; v is: its rate sets it,
    #   whatever the option: 5/8 x 16 = 10. event: sum_k nnz(scores[:, k]) nnz(v[k, :]) = 2 x 4 + 2 x 1 = 10.
    path = record_inference(tmp_path / "t", SpikeAttention(), ATTENTION_X)
    linears = {"rate": 20 * 3, "event": 3 + 5 + 5}
    scores = {("rate", "left"): 6, ("rate", "right"): 10, ("rate", "both"): 3.75,
              ("event", "left"): 5, ("event", "right"): 5, ("event", "both"): 5}
    for (mode, operand), first_matmul in scores.items():
        report = paper(path, mode=mode, matmul_rate=operand)
        q, qk, av = layer(report, "SpikeAttention.q"), layer(report, "SpikeAttention", 1), \
            layer(report, "SpikeAttention", 2)
        assert (q["kind"], q["first"], q["neurobench"]) == ("linear", True, True)
        assert (qk["kind"], qk["input"], qk["dense_mac"], qk["neurobench"]) == ("matmul", "spike", 16, False)
        assert qk["sop"] == pytest.approx(first_matmul), (mode, operand)
        assert (av["kind"], av["dense_mac"], av["sop"]) == ("matmul", 16, 10)
        assert av["input_firing_rate"] == 5 / 8
        sops = linears[mode] + first_matmul + 10
        assert report.totals["sop"] == pytest.approx(sops) and report.totals["mac"] == 0
        assert report.totals["energy_pj"] == pytest.approx(0.9 * sops)
    assert layer(paper(path, matmul_rate="both"), "SpikeAttention", 1)["input_firing_rate"] == 3 / 8 * 5 / 8


# -- the ANN twin: nothing is a spike ----------------------------------------------------------------
def ann_twin() -> nn.Module:
    return nn.Sequential(_set(nn.Linear(3, 4), [[0.5, -1.0, 2.0], [0.3, 0.3, 0.3], [-0.2, 0.7, 0.1], [1.1, 0.0, -0.4]],
                              [0.1, 0.2, 0.3, 0.4]),
                         nn.ReLU(), _set(nn.Linear(4, 2), [[0.2, 0.4, 0.6, 0.8], [-0.5, 0.5, -0.5, 0.5]]))


def test_the_ann_twin_is_all_macs(tmp_path):
    # Eq. 23 (ANN): 4.6 pJ x FLOPs. Linear 3 -> 4 on 2 samples: 24 MACs (first layer); ReLU output
    # (floats): Linear 4 -> 2, 16 MACs. Both modes alike: 40 MACs, 184 pJ, 92 pJ per sample.
    path = record_inference(tmp_path / "t", ann_twin(), MLP_X)
    for mode in ("rate", "event"):
        report = paper(path, mode=mode)
        assert list(report.layers["input"]) == ["non-spike", "non-spike"]
        assert list(report.layers["mac"]) == [24, 16] and report.totals["sop"] == 0
        assert report.per_sample["energy_pj"] == pytest.approx(92.0)
    assert paper(path, non_spike="omit").totals["mac"] == 24  # the first layer is always charged


# -- event mode is NeuroBench's Effective_ACs x samples, run live --------------------------------------
def _data(*shape, spikes: bool = False):
    def make():
        values = torch.rand(5, *shape, generator=torch.Generator().manual_seed(3))
        return (values < 0.4).float() if spikes else values
    return make


LIVE = [
    NeuroBenchCase("strided-conv", StridedConv, _data(1, 4, 4)),
    NeuroBenchCase("sew-block", SEWBlock, _data(4, spikes=True)),
    NeuroBenchCase("mlp-steps", MLP, _data(3)),
    NeuroBenchCase("attention", SpikeAttention, _data(2, 4, spikes=True)),
    *(case for case in CASES if case.name in ("snntorch-leaky-conv", "relu-mlp")),  # pruned weights
]


@pytest.mark.parametrize("case", LIVE, ids=[c.name for c in LIVE])
def test_event_mode_equals_neurobench_effective_acs_times_samples(tmp_path, case):
    pytest.importorskip("neurobench")
    theirs, printed = run_neurobench(case)
    assert "Error" not in printed, printed
    capture(case, tmp_path / "t")
    report = paper(tmp_path / "t", mode="event")
    assert report.samples == 5
    counted = report.layers[report.layers["neurobench"]]  # the attention's matmuls are no NeuroBench layer
    assert counted["sop"].sum() == pytest.approx(theirs["SynapticOperations"]["Effective_ACs"] * 5, rel=1e-12)


# -- published rows, through the energy function -------------------------------------------------------
@pytest.mark.parametrize("model, acs, macs, mj", [
    # syops-counter README (ImageNet, 45 nm): energy = 0.9 x ACs + 4.6 x MACs
    ("spiking_resnet18", 0.10e9, 0.14e9, 0.734), ("sew_resnet18", 0.50e9, 2.75e9, 13.10),
    ("DSNN18 (AAP)", 1.69e9, 0.20e9, 2.44), ("resnet18 (ANN)", 0.0, 1.82e9, 8.372),  # 2.441, printed to 0.01
    # Spikformer Table 2: E = 0.9 pJ x OPs + 4.6 pJ x FL1, FL1 = 0.3468 G (the first conv x T) for its rows
    ("Spikformer-8-384", 6.82e9, 0.3468e9, 7.734), ("Spikformer-8-512", 11.09e9, 0.3468e9, 11.577),
    ("Spikformer-8-768", 22.09e9, 0.3468e9, 21.477),
    # ... and FL1 = 0.1180 G (the 7x7 stem once) for the SEW-ResNet rows
    ("SEW-ResNet-34", 3.88e9, 0.1180e9, 4.035), ("SEW-ResNet-152", 13.72e9, 0.1180e9, 12.891),
])
def test_published_rows_reproduce(model, acs, macs, mj):
    # to the printed digits (and within the 0.001 mJ the Table 2 rows carry from their rounded OPs)
    tolerance = max(1e-3, 0.5 * 10.0 ** -len(repr(mj).partition(".")[2]))
    costs = load_preset("paper-fp32-45nm").costs()
    assert costs == Costs(4.6, 0.9)
    assert energy_pj(macs, acs, costs) * 1e-9 == pytest.approx(mj, abs=tolerance), model
    report = cost(activity_of_counts({"first layer": (macs, 0.0), "the rest": (0.0, acs)}, samples=1), costs)
    assert report.per_sample["energy_mj"] == pytest.approx(mj, abs=tolerance), model


# -- over a test set -------------------------------------------------------------------------------------
def test_spread_over_a_test_set_of_batches(tmp_path):
    # Linear 4 -> 1, weights 1, over 3 batches of spikes: 2 samples with 2 spikes, 2 with 6, 1 with 3.
    # Event SOPs = spikes: per sample 0.9 x (1, 3, 3) pJ; the mean is the set's: 0.9 x 11 / 5 pJ.
    net = _set(nn.Linear(4, 1, bias=False), torch.ones(1, 4))
    batches = [torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0]]), torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 0]]),
               torch.tensor([[1.0, 1, 1, 0]])]
    path = record_inference(tmp_path / "t", net, batches=[(b, None) for b in batches], input_of=lambda b: b[0])
    report = paper(path, mode="event")
    stats = report.test_set["energy_mj"]
    per_batch = [0.9, 2.7, 2.7]
    scipy = pytest.importorskip("scipy.stats")
    std = float(torch.tensor(per_batch, dtype=torch.float64).std())
    half = scipy.t.ppf(0.975, 2) * std / math.sqrt(3)
    assert stats["batches"] == 3 and report.test_set["samples"] == 5 and report.samples == 5
    assert stats["mean"] == pytest.approx(0.9 * 11 / 5 * 1e-9) == report.per_sample["energy_mj"]
    assert stats["std"] == pytest.approx(std * 1e-9)
    assert (stats["ci95_low"], stats["ci95_high"]) == pytest.approx(((1.98 - half) * 1e-9, (1.98 + half) * 1e-9))
    assert layer(report, "Linear")["input_firing_rate"] == 11 / 20  # over the set
    assert not report.test_set["sampled_by_schedule"]
    # a schedule that records every other batch: the output says so
    with Recorder(tmp_path / "s", model=net, schedule=schedule(wait=1, active=1)) as recorder:
        for batch in batches:
            with torch.no_grad(), recorder.stage("forward"):
                net(batch)
            recorder.step()
    sampled = paper(tmp_path / "s")
    assert sampled.test_set["sampled_by_schedule"] and sampled.test_set["batches"] == 1
    assert any("schedule" in note for note in sampled.warnings)


@pytest.mark.parametrize("degrees", [1, 2, 5, 30, 31, 45, 100, 1000, 100000])
def test_t_quantile(degrees):
    scipy = pytest.importorskip("scipy.stats")
    assert t_975(degrees) == pytest.approx(scipy.t.ppf(0.975, degrees), abs=2e-6)


def test_one_batch_has_no_spread():
    assert spread([10.0], [2]) == {"mean": 5.0, "std": None, "ci95_low": None, "ci95_high": None, "batches": 1}


def test_recost_prices_the_presets_from_one_mapping(tmp_path):
    path = record_inference(tmp_path / "t", MLP(), MLP_X)  # 72 MACs, 16 SOPs (rate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = recost(path, "paper", ["paper-fp32-45nm", "paper-int8-45nm", "paper-fp16-45nm"])
        swept = recost(path, "paper", sweep={"e_ac_pj": [0.1, 0.9]})
    totals = frame[frame["key"] == "energy_total_pj"].set_index("preset")["pj"]
    assert totals.to_dict() == pytest.approx({"paper-fp32-45nm": 4.6 * 72 + 0.9 * 16, "paper-int8-45nm":
                                              0.23 * 72 + 0.03 * 16, "paper-fp16-45nm": 1.5 * 72 + 0.4 * 16})
    assert sorted(swept[swept["key"] == "energy_total_pj"]["pj"]) == pytest.approx([4.6 * 72 + 1.6, 4.6 * 72 + 14.4])


def test_options_are_checked(tmp_path):
    path = record_inference(tmp_path / "t", SEWBlock(), torch.tensor([[1.0, 0.0, 1.0, 1.0]]))
    for options in ({"mode": "exact"}, {"first_layer": "twice"}, {"samples": 0}, {"compat": "spikingjelly"}):
        with pytest.raises(ValueError):
            paper(path, **options)


# -- the CLI ---------------------------------------------------------------------------------------------
def _run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result


def test_cli_every_format(tmp_path):
    path = record_inference(tmp_path / "t", SpikeAttention(), ATTENTION_X)
    table = _run("energy", path, "--model", "paper")
    assert table.exit_code == 0, table.output
    for words in ("paper-fp32-45nm (E_MAC 4.6 pJ, E_AC 0.9 pJ)", "mode: rate", "first layer:", "non-spike input",
                  "the left operand's rate", "samples: 1", "SpikeAttention#2", "Total", "test set: 1 batch"):
        assert words in table.stdout, (words, table.stdout)
    document = json.loads(_run("energy", path, "--model", "paper", "--format", "json", "--mode", "event").stdout)
    assert document["samples"] == 1 and document["convention"]["mode"] == "event"
    assert document["totals"]["sop"] == 28 and document["per_sample"]["energy_mj"] == pytest.approx(0.9 * 28e-9)
    for key in ("mac", "sop", "energy_pj"):
        assert key in document["totals"]
    for key in ("mac", "sop", "energy_mj"):
        assert key in document["per_sample"]
    assert {"scope", "kind", "input_firing_rate", "dense_mac", "sop", "mac", "energy_pj"} <= set(document["layers"][0])
    assert document["preset"]["name"] == "paper-fp32-45nm" and document["model"] == "paper"
    markdown = _run("energy", path, "--model", "paper", "--format", "markdown", "--matmul-rate", "both").stdout
    assert markdown.startswith("| Layer | Kind |") and "| **Total** |" in markdown and "both operand" in markdown
    latex = _run("energy", path, "--model", "paper", "--format", "latex", "--preset", "paper-int8-45nm").stdout
    assert r"\toprule" in latex and r"\bottomrule" in latex and r"E\_MAC 0.23 pJ" in latex
    csv = _run("energy", path, "--model", "paper", "--format", "csv", "--non-spike", "omit").stdout.splitlines()
    assert csv[0].startswith("scope,index,kind,") and "non_spike" in csv[0] and csv[-1].startswith("Total,")
    assert len(csv) == 1 + 5 + 1 and all(",omit," in line for line in csv[1:])
    parquet = tmp_path / "layers.parquet"
    assert _run("energy", path, "--model", "paper", "--format", "parquet", "--out", parquet).exit_code == 0
    # a paper preset picks the model; the paper's options and formats are its own
    assert "paper-int32-45nm" in _run("energy", path, "--preset", "paper-int32-45nm").stdout
    refused = _run("energy", path, "--model", "compute", "--mode", "event")
    assert refused.exit_code == 2 and "--mode: options of --model paper" in refused.output
    assert _run("energy", path, "--model", "compute", "--format", "latex").exit_code == 2
    assert _run("energy", path, path, "--model", "paper").exit_code == 2


def test_a_fused_attention_kernel_is_named_not_dropped(tmp_path):
    class Fused(nn.Module):
        def forward(self, q):
            return nn.functional.scaled_dot_product_attention(q, q, q)

    path = record_inference(tmp_path / "t", Fused(), (torch.rand(1, 2, 3, 4) > 0.5).float())
    report = paper(path)
    assert report.layers.empty and any("fused attention kernel are not costed" in note for note in report.warnings)


def test_record_inference_takes_inputs_or_batches(tmp_path):
    with pytest.raises(ValueError, match="not both or neither"):
        record_inference(tmp_path / "t", SEWBlock())
    with pytest.raises(ValueError, match="not both or neither"):
        record_inference(tmp_path / "u", SEWBlock(), torch.ones(1, 4), batches=[torch.ones(1, 4)])
