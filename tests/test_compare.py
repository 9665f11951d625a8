"""`spiketrace compare` (analyze/energy/comparison.py, analyze/present/comparison.py): each row
equals the model's own `energy` for that preset, computed apart; the defaults hold every chip
preset of grade A or B and the paper presets; the figure has one bar per preset; the report
has the section (or a one-line reason); recost sweeps the chip and paper parameters.
"""

from __future__ import annotations

import json
import warnings

import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.image import imread

from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import energy, list_presets, recost
from spiketrace.analyze.energy.comparison import compare, default_presets
from spiketrace.analyze.present.comparison import figure
from spiketrace.analyze.present.report import build_report
from spiketrace.analyze.results import Analysis
from spiketrace.capture import record_inference
from tests.test_chip_energy import MLP, X  # a spiking MLP over 3 time steps, 2 samples, derived by hand there

CHIPS_AB = sorted(p.name for p in list_presets() if p.model == "chip" and p.provenance.get("grade") in ("A", "B"))
PAPERS = sorted(p.name for p in list_presets() if p.model == "paper")


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return record_inference(tmp_path_factory.mktemp("compare") / "t", MLP(), X)


def own(path, model, preset, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return energy(path, model, preset, **options)


def test_defaults_are_every_graded_chip_and_every_paper_preset():
    names = default_presets()
    assert sorted(n for n in names if n in CHIPS_AB) == CHIPS_AB and len(CHIPS_AB) >= 5
    assert {"loihi-2018", "truenorth-2014", "odin-2019", "spinnaker1-2012", "seneca-2023"} <= set(CHIPS_AB)
    assert sorted(n for n in names if n.startswith("paper-")) == PAPERS
    assert names[len(CHIPS_AB)] == "paper-fp32-45nm"  # the convention's own preset leads the paper rows
    assert len(names) == len(CHIPS_AB) + len(PAPERS)


def test_each_row_equals_the_models_own_energy(mlp):
    result = compare(mlp)
    rows = result.rows.set_index("preset")
    assert list(rows.index) == default_presets() and result.samples == 2
    for name in CHIPS_AB:
        report = own(mlp, "chip", name)
        assert rows.loc[name, "energy_pj"] == pytest.approx(report.totals["energy_pj"])
        assert rows.loc[name, "energy_per_sample_pj"] == pytest.approx(report.per_sample["energy_pj"])
        assert rows.loc[name, "model"] == "chip"
    for name in PAPERS:
        report = own(mlp, "paper", name)
        assert rows.loc[name, "energy_per_sample_pj"] == pytest.approx(report.per_sample["energy_pj"])
        assert rows.loc[name, "scope"] == "compute only"
    # the hand numbers of tests/test_chip_energy.py: TrueNorth 10 events x 26 pJ over 2 samples
    assert rows.loc["truenorth-2014", "energy_per_sample_pj"] == pytest.approx(130)
    assert (rows.loc["truenorth-2014", "grade"], rows.loc["truenorth-2014", "scope"]) == ("B", "all-in")
    assert rows.loc["odin-2019", "basis"] == "measured" and rows.loc["loihi-2018", "basis"] == "simulated"
    # what each leaves uncosted: the first layer's 72 host MACs and static energy (no step time)
    assert "host work (72 MACs)" in rows.loc["loihi-2018", "uncosted"]
    assert "static energy" in rows.loc["loihi-2018", "uncosted"]
    assert rows.loc["paper-fp32-45nm", "uncosted"] == "memory, neuron updates, static energy"


def test_options_reach_the_models_and_each_model_is_mapped_once(mlp):
    options = {"samples": 4, "time_steps": 6, "step_time": "1ms", "host": "paper-fp32-45nm"}
    with Analysis(mlp) as analysis:
        result = compare(analysis.trace, ["spinnaker1-2012", "loihi-2018", "paper-int8-45nm", "compute-fp16-45nm"],
                         activity_of=lambda model, **o: analysis.activity(model, **o), **options)
        assert analysis.mapped == {"chip": 1, "paper": 1}
    rows = result.rows.set_index("preset")
    spinnaker = own(mlp, "chip", "spinnaker1-2012", **options)
    assert rows.loc["spinnaker1-2012", "energy_per_sample_pj"] == pytest.approx(spinnaker.per_sample["energy_pj"])
    loihi = own(mlp, "chip", "loihi-2018", **options)
    assert rows.loc["loihi-2018", "energy_pj"] == pytest.approx(loihi.totals["energy_pj"])
    paper = own(mlp, "paper", "paper-int8-45nm", samples=4, time_steps=6)
    assert rows.loc["paper-int8-45nm", "energy_per_sample_pj"] == pytest.approx(paper.per_sample["energy_pj"])
    # a compute preset priced as the paper convention prices it: its E_MAC and E_AC on the paper activity
    fp16 = own(mlp, "paper", "paper-fp16-45nm", samples=4, time_steps=6)
    assert rows.loc["compute-fp16-45nm", "energy_pj"] == pytest.approx(fp16.totals["energy_pj"])
    assert rows.loc["compute-fp16-45nm", "model"] == "paper (compute preset)"
    assert result.samples == 4 and "host work" not in rows.loc["loihi-2018", "uncosted"]
    with pytest.raises(ValueError, match="neuromc preset"):
        compare(mlp, ["neuromc-like-v1"])


def test_the_figure_has_one_bar_per_preset(mlp, tmp_path):
    result = compare(mlp)
    drawn = figure(result)
    bars = [p for p in drawn.axes[0].patches if p.get_width() > 0]
    assert len(bars) == len(result.rows)
    assert drawn.axes[0].get_xscale() == "log"
    labels = [t.get_text() for t in drawn.axes[0].texts]
    assert " grade B, all-in" in labels and sum("compute only" in t for t in labels) == len(PAPERS)
    assert [t.get_text() for t in drawn.axes[0].get_yticklabels()] == list(result.rows["preset"])
    runner = CliRunner()
    out = tmp_path / "fig.png"
    done = runner.invoke(main, ["plot", str(mlp), "compare", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and imread(out).shape[0] > 100


def test_cli_formats(mlp, tmp_path):
    runner = CliRunner()
    table = runner.invoke(main, ["compare", str(mlp), "--samples", "8"])
    assert table.exit_code == 0, table.output
    assert f"energy per sample under {len(default_presets())} presets: 8 samples" in table.output
    for name in [*CHIPS_AB, *PAPERS]:
        assert name in table.output
    assert "8 samples" in table.output and "all-in" in table.output
    csv = tmp_path / "c.csv"
    done = runner.invoke(main, ["compare", str(mlp), "--preset", "truenorth-2014", "--preset", "paper-fp32-45nm",
                                "--format", "csv", "--out", str(csv), "--plot", str(tmp_path / "c.png")])
    assert done.exit_code == 0, done.output
    rows = pd.read_csv(csv)
    assert list(rows["preset"]) == ["truenorth-2014", "paper-fp32-45nm"] and (tmp_path / "c.png").exists()
    assert rows.loc[0, "energy_per_sample_pj"] == pytest.approx(130)
    document = json.loads(runner.invoke(main, ["compare", str(mlp), "--format", "json", "--step-time", "1ms"]).stdout)
    assert document["samples"] == 2 and document["options"] == {"step_time": "1ms"}
    assert {p["preset"] for p in document["presets"]} == set(default_presets())
    markdown = runner.invoke(main, ["compare", str(mlp), "--format", "markdown"])
    assert markdown.exit_code == 0 and "| model | preset | grade |" in markdown.stdout
    refused = runner.invoke(main, ["compare", str(mlp), "--step-time", "soon"])
    assert refused.exit_code != 0 and "step time" in refused.output


def test_the_report_has_the_section(mlp, tmp_path):
    html = build_report(mlp, model="paper")
    assert '<section id="chips">' in html and "Chips and the paper convention" in html
    assert 'id="chip-comparison"' in html and "truenorth-2014" in html and 'alt="energy per sample per preset"' in html
    # captured at the synaptic level: enough for the paper model, not for the chip's neuron updates
    bare = record_inference(tmp_path / "bare", MLP(), X, value_statistics="synaptic")
    html = build_report(bare, model="paper")
    assert '<section id="chips">' in html and "not compared:" in html and 'id="chip-comparison"' not in html


def test_recost_sweeps_the_chip_and_paper_parameters(mlp, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chip = recost(mlp, "chip", ["loihi-2018"], sweep={"e_synaptic_op_pj": [10.0, 20.0, 30.0]})
        paper = recost(mlp, "paper", ["paper-fp32-45nm"], sweep={"e_ac_pj": [0.1, 0.5, 0.9]})
    totals = chip[chip["key"] == "energy_total_pj"].set_index("e_synaptic_op_pj")["pj"]
    base = own(mlp, "chip", "loihi-2018").totals["energy_pj"]  # 10 events x 23.6 pJ of it is synaptic
    assert totals.to_dict() == pytest.approx({v: base + 10 * (v - 23.6) for v in (10.0, 20.0, 30.0)})
    assert set(chip["preset_grade"]) == {"B"}  # each swept row still names its grade
    totals = paper[paper["key"] == "energy_total_pj"].set_index("e_ac_pj")["pj"]
    fp32 = own(mlp, "paper", "paper-fp32-45nm")
    assert totals.to_dict() == pytest.approx({v: fp32.totals["mac"] * 4.6 + fp32.totals["sop"] * v for v in (0.1, 0.5, 0.9)})
    runner = CliRunner()
    for args, rows in ((["--model", "chip", "--preset", "loihi-2018", "--sweep", "e_synaptic_op_pj=10:30:5"], 5),
                       (["--preset", "paper-fp32-45nm", "--sweep", "e_ac_pj=0.1:0.9:5", "--sweep", "e_mac_pj=1:5:2"], 10)):
        out = tmp_path / "s.csv"
        done = runner.invoke(main, ["recost", str(mlp), *args, "--out", str(out)])
        assert done.exit_code == 0, done.output
        assert pd.read_csv(out)["preset"].nunique() == rows
