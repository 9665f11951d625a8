"""The chip model (analyze/energy/chip.py, `spiketrace energy --model chip`): each chip preset's
figures equal the catalogue's (../shared/reference/hardware_catalogue.md, row ids in the
comments); energies derived by hand on a small spiking MLP over 3 time steps; static and
time-based terms only with a step time; TrueNorth's all-in figure alone; grade C refused; the
host-costed first layer listed with its MACs; the CLI in each format.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import energy, load_preset, read_preset_file, recost
from spiketrace.analyze.energy.chip import parse_step_time
from spiketrace.analyze.presets import PresetError
from spiketrace.capture import record_inference
from tests.test_paper_energy import IF  # the same integrate-and-fire neuron

CHIPS = ("loihi-2018", "truenorth-2014", "odin-2019", "spinnaker1-2012", "seneca-2023")


# -- the presets: every number as the catalogue gives it ------------------------------------------------
def test_each_chip_preset_holds_the_catalogue_numbers():
    loihi = load_preset("loihi-2018")
    assert loihi.flat() == {"e_synaptic_op_pj": 23.6,  # L1: 23.6 pJ per synaptic spike op (min)
                            "e_neuron_update_active_pj": 81,  # L3: 81 pJ active
                            "e_neuron_update_inactive_pj": 52,  # L3: 52 pJ inactive
                            "e_spike_pj": 1.7}  # L4: 1.7 pJ within-tile spike
    assert loihi.provenance == {"grade": "B", "basis": "simulated", "node": "Intel 14 nm FinFET", "voltage": "0.75 V",
                                "scope": "per-term", "rows": "L1, L3, L4"}
    truenorth = load_preset("truenorth-2014")
    assert truenorth.flat() == {"e_synaptic_op_pj": 26}  # T1: 26 pJ per synaptic event, all-in
    assert truenorth.provenance == {"grade": "B", "basis": "measured", "node": "Samsung 28 nm", "voltage": "0.775 V",
                                    "scope": "all-in", "rows": "T1"}
    odin = load_preset("odin-2019")
    assert odin.flat() == {"e_synaptic_op_pj": 12.7}  # O1: 12.7 pJ minimum per SOP
    assert odin.provenance == {"grade": "A", "basis": "measured", "node": "28 nm FDSOI", "voltage": "0.55 V",
                               "scope": "minimum", "rows": "O1"}
    spinnaker = load_preset("spinnaker1-2012")
    assert spinnaker.flat() == {"e_synaptic_op_pj": 43 * 1000,  # S1: 43 nJ per PSP
                                "neuron_time_nj_per_ms": 100}  # S1: 100 nJ per neuron per ms
    assert spinnaker.units["e_synaptic_op_pj"] == "pJ" and spinnaker.units["neuron_time_nj_per_ms"] == "nJ/ms"
    assert (spinnaker.provenance["grade"], spinnaker.provenance["basis"], spinnaker.provenance["node"],
            spinnaker.provenance["rows"]) == ("A", "measured", "130 nm (ARM968)", "S1")
    seneca = load_preset("seneca-2023")
    assert seneca.flat() == {"e_synaptic_op_pj": 2.8}  # SE: about 2.8 pJ per synaptic operation
    assert (seneca.provenance["grade"], seneca.provenance["basis"], seneca.provenance["node"]) == (
        "A", "simulated/synthesized", "GF 22 nm")
    for name in CHIPS:
        preset = load_preset(name)
        assert preset.model == "chip" and preset.source and preset.provenance["grade"] in ("A", "B")
        assert set(preset.provenance) >= {"grade", "basis", "node", "voltage", "scope"}


_TOML = """[preset]
name = "made-up"
model = "chip"
description = "a chip"
source = "somebody"
grade = "{grade}"
basis = "measured"
node = "28 nm"
voltage = "0.8 V"
scope = "per-term"

[parameters]
e_synaptic_op_pj = {{ value = 2.5, unit = "pJ" }}
"""


def test_grades_c_and_d_are_refused_in_one_line_naming_the_file_and_key(tmp_path):
    for grade in ("C", "D"):
        path = tmp_path / f"{grade}.toml"
        path.write_text(_TOML.format(grade=grade))
        with pytest.raises(PresetError) as raised:
            read_preset_file(path)
        why = {"C": "a secondary table or tool code; the primary text was not seen",
               "D": "recollection, or a number that could not be traced"}[grade]
        assert raised.value.problems == [f"{path}: [preset] grade = '{grade}': grade {grade} ({why}) is refused; "
                                         "only grades A and B ship"]
    path = tmp_path / "A.toml"
    path.write_text(_TOML.format(grade="A"))
    assert read_preset_file(path).provenance["grade"] == "A"
    path.write_text(_TOML.format(grade="A").replace('scope = "per-term"\n', ""))
    with pytest.raises(PresetError, match=r"\[preset\] lacks scope"):
        read_preset_file(path)
    result = CliRunner().invoke(main, ["presets", "validate", str(tmp_path / "C.toml")])
    assert result.exit_code != 0 and "grade = 'C'" in result.output


# -- a spiking MLP over 3 time steps ---------------------------------------------------------------------


def _set(layer: nn.Module, weight, bias) -> nn.Module:
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))
        layer.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))
    return layer


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = _set(nn.Linear(3, 4), torch.zeros(4, 3), [0.5, 1.0, 0.0, 0.25])
        self.sn1 = IF()
        self.fc2 = _set(nn.Linear(4, 2), [[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]], [0.0, 0.0])
        self.sn2 = IF()

    def forward(self, x):
        self.sn1.v = self.sn2.v = None
        return sum(self.sn2(self.fc2(self.sn1(self.fc1(x)))) for _ in range(3))


# The hand derivation, 2 samples (x's dim 0), T = 3 (each IF runs 3 times per batch):
# fc1: x is not spikes, so a chip cannot take it as events: host work, 3 calls x 2 x 3 x 4 = 72 MACs.
#   Its weights are 0: its output is its bias [0.5, 1, 0, 0.25] at every step, in both samples.
# sn1 (4 neurons x 2 samples = 8 updates a step, 24 over 3 steps): input nnz 3 per sample (neuron 2's is 0),
#   6 per step. Spikes per sample: step 1 [0,1,0,0]; step 2 [1,1,0,0] (neuron 0: 0.5 + 0.5); step 3 [0,1,0,0]:
#   2, 4, 2 over both samples = 8. Active = max(input nnz, spikes) per step = 6, 6, 6 = 18; inactive 24 - 18 = 6.
# fc2 over sn1's spikes: synaptic events = sum over inputs k of spikes(k) x nonzero weights from k:
#   per sample input 0 spikes once, input 1 three times; W's columns 0, 1 hold 2 and 1 nonzeros:
#   1 x 2 + 3 x 1 = 5, so 10 over the two samples.
#   Its output per sample: step 1 [1, 0]; step 2 [2, 1]; step 3 [1, 0].
# sn2 (2 neurons x 2 samples = 4 updates a step, 12 in all): input nnz 2, 4, 2 (per sample 1, 2, 1);
#   neuron 0: v 1 (spike, 0), 2 (spike, 1), 2 (spike, 1); neuron 1: v 0, 1 (spike, 0), 0: spikes per step
#   2, 4, 2 = 8. Active = 2, 4, 2 = 8; inactive 12 - 8 = 4.
# Totals: 10 synaptic events, 36 updates (26 active, 10 inactive), 16 spikes, 72 host MACs.
X = torch.tensor([[0.3, 0.7, 2.0], [1.5, 0.2, 0.9]])
EVENTS, ACTIVE, INACTIVE, SPIKES, HOST_MACS, SAMPLES, STEPS = 10, 26, 10, 16, 72, 2, 3


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return record_inference(tmp_path_factory.mktemp("chip") / "t", MLP(), X)


def chip(path, preset, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return energy(path, "chip", preset, **options)


def terms(report) -> dict[str, tuple]:
    return {row["term"]: (row["count"], row["energy_pj"], row["status"]) for _, row in report.terms.iterrows()}


def test_the_mlp_counts(mlp):
    report = chip(mlp, "loihi-2018")
    neurons = report.neurons.set_index("module")
    assert neurons.loc["MLP.sn1", ["calls", "updates", "active", "inactive", "spikes"]].tolist() == [3, 24, 18, 6, 8]
    assert neurons.loc["MLP.sn2", ["calls", "updates", "active", "inactive", "spikes"]].tolist() == [3, 12, 8, 4, 8]
    layers = report.synaptic.set_index("scope")
    assert (layers.loc["MLP.fc1", "sop"], layers.loc["MLP.fc1", "mac"], layers.loc["MLP.fc1", "charged"]) == (0, 72, "first")
    assert (layers.loc["MLP.fc2", "sop"], layers.loc["MLP.fc2", "mac"]) == (EVENTS, 0)
    assert report.samples == SAMPLES and report.time["time_steps"] == STEPS
    assert (report.totals["synaptic_events"], report.totals["active"], report.totals["inactive"],
            report.totals["spikes"], report.totals["host_mac"]) == (EVENTS, ACTIVE, INACTIVE, SPIKES, HOST_MACS)


def test_loihi_per_term_without_and_with_a_step_time(mlp):
    # 23.6 x 10 + 81 x 26 + 52 x 10 + 1.7 x 16 = 236 + 2106 + 520 + 27.2 = 2889.2 pJ; per sample 1444.6
    report = chip(mlp, "loihi-2018")
    assert report.totals["energy_pj"] == pytest.approx(2889.2)
    assert report.per_sample["energy_pj"] == pytest.approx(1444.6)
    t = terms(report)
    assert t["synaptic"][1] == pytest.approx(236) and t["neuron_active"][1] == pytest.approx(2106)
    assert t["neuron_inactive"][1] == pytest.approx(520) and t["spike"][1] == pytest.approx(27.2)
    assert t["static"][2] == "not in preset" and t["host"][2] == "uncosted"
    assert not report.totals["static_included"]
    assert any(n.startswith("static energy not included: no time per step") for n in report.warnings)
    # a step time alone adds nothing to Loihi (Table 2 has no static power) and says so
    timed = chip(mlp, "loihi-2018", step_time="1ms")
    assert timed.totals["energy_pj"] == pytest.approx(2889.2)
    assert any(n == "static energy not included: the preset gives no static power" for n in timed.warnings)
    # static power given (an override): 2 mW x chip time (2 samples x 3 steps x 1 ms = 6 ms) = 12 uJ = 1.2e7 pJ
    with_static = chip(mlp, load_preset("loihi-2018", ["static_power_mw=2"]), step_time="1ms")
    assert with_static.time["chip_time_s"] == pytest.approx(6e-3)
    assert terms(with_static)["static"][1] == pytest.approx(1.2e7)
    assert with_static.totals["energy_pj"] == pytest.approx(2889.2 + 1.2e7) and with_static.totals["static_included"]
    no_time = chip(mlp, load_preset("loihi-2018", ["static_power_mw=2"]))
    assert terms(no_time)["static"][2] == "needs step time" and no_time.totals["energy_pj"] == pytest.approx(2889.2)


def test_spinnaker_charges_its_per_neuron_per_ms_term_only_with_a_step_time(mlp):
    # 43 nJ x 10 PSPs = 430000 pJ; untimed: the 100 nJ/neuron/ms term is listed, uncosted
    report = chip(mlp, "spinnaker1-2012")
    assert report.totals["energy_pj"] == pytest.approx(430_000)
    assert terms(report)["neuron_time"][2] == "needs step time"
    # 1 ms steps: 36 neuron updates x 1 ms x 100 nJ = 3600 nJ = 3.6e6 pJ
    timed = chip(mlp, "spinnaker1-2012", step_time="1 ms")
    assert terms(timed)["neuron_time"][1] == pytest.approx(3.6e6)
    assert timed.totals["energy_pj"] == pytest.approx(430_000 + 3.6e6)
    assert chip(mlp, "spinnaker1-2012", step_time=0.0005).totals["energy_pj"] == pytest.approx(430_000 + 1.8e6)


def test_truenorth_adds_no_other_term(mlp):
    for options in ({}, {"step_time": "1ms"}):
        report = chip(mlp, "truenorth-2014", **options)
        assert report.totals["energy_pj"] == pytest.approx(26 * EVENTS)  # 260 pJ
        costed = report.terms[report.terms["status"] == "costed"]["term"].tolist()
        assert costed == ["synaptic"]
    result = CliRunner().invoke(main, ["energy", str(mlp), "--model", "chip", "--preset", "truenorth-2014"])
    assert "neuron_active    active neuron updates" in result.output and "inside the all-in synaptic figure" in result.output


def test_odin_and_seneca_cost_synaptic_operations_only(mlp):
    assert chip(mlp, "odin-2019").totals["energy_pj"] == pytest.approx(12.7 * EVENTS)
    assert chip(mlp, "seneca-2023").totals["energy_pj"] == pytest.approx(2.8 * EVENTS)


def test_the_first_layer_is_host_work_listed_with_its_macs(mlp):
    report = chip(mlp, "truenorth-2014")
    count, pj, status = terms(report)["host"]
    assert (count, status) == (HOST_MACS, "uncosted") and pj != pj  # NaN: not costed
    hosted = chip(mlp, "truenorth-2014", host="paper-fp32-45nm")
    # 72 MACs x 4.6 pJ = 331.2 pJ on the host, beside 260 pJ on the chip
    assert terms(hosted)["host"][1] == pytest.approx(331.2)
    assert hosted.totals["host_pj"] == pytest.approx(331.2) and hosted.totals["chip_pj"] == pytest.approx(260)
    assert hosted.host["name"] == "paper-fp32-45nm"
    with pytest.raises(ValueError, match="no e_mac_pj"):
        chip(mlp, "truenorth-2014", host="loihi-2018")


def test_recost_under_several_chips(mlp):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = recost(mlp, "chip", ["loihi-2018", "truenorth-2014", "odin-2019"])
    totals = frame[frame["key"] == "energy_total_pj"].set_index("preset")["pj"]
    assert totals.to_dict() == pytest.approx({"loihi-2018": 2889.2, "truenorth-2014": 260, "odin-2019": 127})
    graded = frame.drop_duplicates("preset").set_index("preset")
    assert graded["preset_grade"].to_dict() == {"loihi-2018": "B", "truenorth-2014": "B", "odin-2019": "A"}
    assert graded.loc["truenorth-2014", "preset_scope"] == "all-in"
    assert graded.loc["odin-2019", "preset_source"].startswith("Frenkel")


def test_step_times_parse():
    assert parse_step_time("1ms") == pytest.approx(1e-3) and parse_step_time("250us") == pytest.approx(2.5e-4)
    assert parse_step_time(0.002) == 0.002 and parse_step_time(None) is None
    for bad in ("fast", "0ms", "-1ms"):
        with pytest.raises(ValueError):
            parse_step_time(bad)


# -- the CLI ------------------------------------------------------------------------------------------
def test_cli_table_csv_json(mlp, tmp_path):
    runner = CliRunner()
    base = ["energy", str(mlp), "--model", "chip", "--preset", "loihi-2018"]
    table = runner.invoke(main, base)
    assert table.exit_code == 0, table.output
    assert "under loihi-2018: 1.4446 nJ per sample" in table.output
    assert "grade B, simulated, Intel 14 nm FinFET, 0.75 V, scope per-term" in table.output
    assert "source: Davies et al." in table.output and "static energy not included" in table.output
    assert "host work: MLP.fc1 (linear, non-spike input): 72 MACs, uncosted" in table.output
    csv = runner.invoke(main, [*base, "--format", "csv", "--out", str(tmp_path / "c.csv")])
    assert csv.exit_code == 0, csv.output
    import pandas as pd

    rows = pd.read_csv(tmp_path / "c.csv")
    assert set(rows["grade"]) == {"B"} and set(rows["scope"]) == {"per-term"}
    assert rows.set_index("term").loc["synaptic", "energy_pj"] == pytest.approx(236)
    out = tmp_path / "c.json"
    done = runner.invoke(main, [*base, "--format", "json", "--out", str(out), "--step-time", "1ms", "--host",
                                "paper-fp32-45nm"])
    assert done.exit_code == 0, done.output
    document = json.loads(out.read_text())
    assert document["model"] == "chip" and document["preset"]["provenance"]["grade"] == "B"
    assert document["preset"]["source"].startswith("Davies")
    assert document["totals"]["energy_pj"] == pytest.approx(2889.2 + 331.2)
    assert document["static_included"] is False and document["time"]["step_time_s"] == 0.001
    assert document["per_sample"]["energy_pj"] == pytest.approx((2889.2 + 331.2) / 2)
    assert [layer["name"] for layer in document["layers"]] == ["MLP.fc1", "MLP.fc2"]
    assert {t["term"] for t in document["terms"]} == {"synaptic", "neuron_active", "neuron_inactive", "spike",
                                                       "neuron_time", "static", "host"}
    # --samples and --time-steps (shared with --model paper): chip time 4 samples x 6 steps x 1 ms = 24 ms
    given = runner.invoke(main, ["energy", str(mlp), "--preset", "spinnaker1-2012", "--samples", "4", "--time-steps", "6",
                                 "--step-time", "1ms", "--format", "json", "--out", str(out)])
    assert given.exit_code == 0, given.output
    document = json.loads(out.read_text())
    assert document["samples"] == 4 and document["time"]["chip_time_s"] == pytest.approx(0.024)
    assert document["time"]["time_steps_source"] == "given"
    assert document["per_sample"]["energy_pj"] == pytest.approx((430_000 + 3.6e6) / 4)
    refused = runner.invoke(main, ["energy", str(mlp), "--model", "compute", "--step-time", "1ms"])
    assert refused.exit_code != 0 and "options of --model chip" in refused.output
    refused = runner.invoke(main, [*base, "--mode", "rate"])
    assert refused.exit_code != 0 and "options of --model paper" in refused.output


def test_presets_show_names_source_and_grade():
    result = CliRunner().invoke(main, ["presets", "show", "truenorth-2014"])
    assert result.exit_code == 0, result.output
    assert "source: Merolla et al." in result.output
    assert "provenance: grade B, measured, Samsung 28 nm, 0.775 V, scope all-in (catalogue rows T1)" in result.output
    shown = json.loads(CliRunner().invoke(main, ["presets", "show", "odin-2019", "--format", "json"]).output)
    assert shown["provenance"]["grade"] == "A" and shown["provenance"]["scope"] == "minimum"
