"""`spiketrace recost` takes the paper and chip models' own options, as `energy` does: each
preset's total equals `energy()` under the same options, computed on its own through the API;
a flag of another model is refused, naming it."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import energy
from spiketrace.capture.session.example import record_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return record_demo(tmp_path_factory.mktemp("demo") / "trace")


def recost_totals(trace, tmp_path, *args: str) -> dict[str, float]:
    out = tmp_path / "recost.csv"
    result = CliRunner().invoke(main, ["recost", str(trace), *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    totals = frame[frame["key"] == "energy_total_pj"]
    return dict(zip(totals["preset"], totals["pj"]))


def test_paper_options_reach_every_preset(demo, tmp_path):
    got = recost_totals(demo, tmp_path, "--model", "paper", "--mode", "event", "--samples", "8",
                        "--preset", "paper-fp32-45nm", "--preset", "paper-int8-45nm")
    with open_trace(demo) as trace:
        for preset in ("paper-fp32-45nm", "paper-int8-45nm"):
            alone = energy(trace, "paper", preset, mode="event", samples=8, stage="forward")
            assert got[preset] == pytest.approx(alone.energy_total_pj, rel=1e-12)


def test_a_step_time_charges_the_time_terms_of_every_chip_preset(demo, tmp_path):
    # SpiNNaker 1's 100 nJ per neuron per ms is charged only with a time per step: the totals
    # differ by that term, and each equals energy() given the same step time
    without = recost_totals(demo, tmp_path, "--model", "chip", "--preset", "spinnaker1-2012")
    with_time = recost_totals(demo, tmp_path, "--model", "chip", "--preset", "spinnaker1-2012", "--step-time", "1ms")
    with open_trace(demo) as trace:
        alone = energy(trace, "chip", "spinnaker1-2012", step_time="1ms", stage="forward")
    assert with_time["spinnaker1-2012"] == pytest.approx(alone.energy_total_pj, rel=1e-12)
    assert with_time["spinnaker1-2012"] > without["spinnaker1-2012"]


@pytest.mark.parametrize(("args", "named"), [
    (["--model", "chip", "--preset", "loihi-2018", "--mode", "event"], "--mode: options of --model paper"),
    (["--preset", "paper-fp32-45nm", "--step-time", "1ms"], "--step-time: options of --model chip"),
    (["--model", "compute", "--samples", "8"], "--samples: options of --model"),
])
def test_a_flag_of_another_model_is_refused_naming_it(demo, tmp_path, args, named):
    result = CliRunner().invoke(main, ["recost", str(demo), *args, "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and named in result.output, result.output
    assert not (tmp_path / "x.csv").exists()
