"""What a user sees: the default model suits the trace and says its scope, the
report says what it could not cost, plots leave the user's matplotlib alone. CLI tests run
the installed `spiketrace` in a subprocess, as a user does."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch
from spikingjelly.activation_based import neuron
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import energy
from spiketrace.capture import Recorder, record_training_step


def spiketrace(*args, check=True):
    done = subprocess.run(["spiketrace", *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), neuron.LIFNode(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5), neuron.IFNode())


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    x, y = (torch.rand(2, 1, 8, 8) > 0.5).float(), torch.tensor([1, 3])
    model = net()
    path = tmp_path_factory.mktemp("ux") / "train"
    record_training_step(path, model, x, target=y, loss_fn=nn.functional.cross_entropy,
                         optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    return path


@pytest.fixture(scope="module")
def inference(tmp_path_factory):
    model = net().eval()
    path = tmp_path_factory.mktemp("ux") / "infer"
    with Recorder(path, model=model) as rec, rec.stage("forward"), torch.no_grad():
        model((torch.rand(2, 1, 8, 8) > 0.5).float())
    return path


def total_line(stdout: str) -> str:
    return stdout.splitlines()[0]


def test_a_training_trace_gets_the_training_model_and_its_scope(training):
    shown = spiketrace("energy", training)
    # before: "compute energy under compute-fp32-45nm: ..." with no word about backward
    assert total_line(shown.stdout).startswith("neuromc energy (training: forward, backward, optimizer) under neuromc-like-v1:")
    with open_trace(training) as trace:
        expected = energy(trace, "neuromc").energy_total_pj
    shown_value = float(re.search(r": ([\d,.]+) (\w+)$", total_line(shown.stdout)).group(1).replace(",", ""))
    unit = total_line(shown.stdout).rsplit(" ", 1)[1]
    assert shown_value * {"pJ": 1, "nJ": 1e3, "µJ": 1e6, "mJ": 1e9}[unit] == pytest.approx(expected, rel=1e-3)


def test_a_forward_model_on_a_training_trace_says_what_it_leaves_out(training):
    shown = spiketrace("energy", training, "--model", "compute")
    assert "compute energy (forward-only)" in total_line(shown.stdout)
    with open_trace(training) as trace:
        phases = dict(trace.con.execute("SELECT phase, count(*) FROM events GROUP BY phase").fetchall())
    warning = [line for line in shown.stderr.splitlines() if line.startswith("warning: the compute model")]
    assert len(warning) == 1
    assert f"backward ({phases['backward']} ops)" in warning[0] and f"optimizer ({phases['optimizer']} ops)" in warning[0]


def test_an_inference_trace_gets_compute_without_a_warning(inference):
    shown = spiketrace("energy", inference)
    assert total_line(shown.stdout).startswith("compute energy (forward-only) under compute-fp32-45nm:")
    assert "warning" not in shown.stderr


def test_python_warns_once_per_call_outside_the_models_scope(training, inference):
    with open_trace(training) as trace, pytest.warns(UserWarning, match="forward-only"):
        energy(trace, "compute")
    with open_trace(inference) as trace:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert energy(trace).energy_total_pj > 0  # compute on inference: in scope, no warning


@pytest.mark.parametrize("model", ["neuromc", "lemaire", "spikesim"])
def test_the_report_says_what_the_model_could_not_cost(training, tmp_path, model):
    out = tmp_path / f"{model}.html"
    spiketrace("report", training, "--model", model, "--out", out)  # spikesim used to crash here
    page = out.read_text()
    block = page[page.index("What the numbers leave out"):page.index("Energy by component")]
    with open_trace(training) as trace:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = energy(trace, model)
    for warning in report.warnings:  # the model's own, e.g. "Lemaire formulas do not support ..."
        assert warning.replace("'", "&#x27;").replace('"', "&quot;") in block
    uncosted = getattr(report, "uncosted", None)
    if uncosted is not None and len(uncosted):  # NeuroMC: max-pool backward, loss backward, ...
        assert f"{len(uncosted)} kinds of work the neuromc model did not cost" in block
        for name in uncosted["name"]:
            assert name in block
    assert "inference-only" in block or "training" in block


def test_importing_the_plots_leaves_the_users_backend_alone():
    code = ("import matplotlib; before = matplotlib.get_backend(); import sys\n"
            "import spiketrace.analyze.present.plots, spiketrace.analyze.present.report\n"
            "assert matplotlib.get_backend() == before, (before, matplotlib.get_backend())\n"
            "assert 'matplotlib.pyplot' not in sys.modules\n")
    env = {**os.environ, "MPLBACKEND": "svg"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def test_energy_shares_are_per_level_and_names_carry_no_unit_suffix(training):
    shown = spiketrace("energy", training, "--model", "compute").stdout.splitlines()
    rows = [line for line in shown[2:] if line and not line.startswith("(")]
    top = [r for r in rows if not r.startswith(" ")]
    children = [r for r in rows if r.startswith("  ")]
    share = lambda row: float(row.rsplit(None, 1)[1].rstrip("%"))  # noqa: E731 - a one-line helper
    # before: parents and children together (memory_pj beside parameter_memory_pj): 195%
    assert sum(map(share, top)) == pytest.approx(100, abs=0.3)
    assert sum(map(share, children)) == pytest.approx(100, abs=0.3)  # memory's two parts
    assert not any("_pj" in r for r in rows) and {r.split()[0] for r in top} == {"memory", "mac", "ac"}


def two_widths(tmp_path):
    paths = []
    for hidden in (8, 16):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(10, hidden), neuron.IFNode(), nn.Linear(hidden, 4), neuron.IFNode())
        with Recorder(tmp_path / f"h{hidden}", model=model) as rec, rec.stage("forward"), torch.no_grad():
            model((torch.rand(6, 10) > 0.5).float())
        paths.append(tmp_path / f"h{hidden}")
    return paths


def test_diff_prints_units_and_gates_take_them(tmp_path):
    a, b = two_widths(tmp_path)
    with open_trace(a) as ta, open_trace(b) as tb:
        delta_pj = energy(tb, "compute").energy_total_pj - energy(ta, "compute").energy_total_pj
    assert delta_pj > 0
    below, above = delta_pj / 1e3 * 0.9, delta_pj / 1e3 * 1.1  # in nJ, around the real change
    failing = spiketrace("diff", a, b, "--fail-if", f"energy.total>{below:.6f}nJ", check=False)
    assert failing.returncode == 1 and "FAIL: energy.total changed +" in failing.stderr
    assert spiketrace("diff", a, b, "--fail-if", f"energy.total>{above / 1e3:.9f} uJ").returncode == 0
    # energies print with their unit, not as 1.23975e+08
    line = next(text for text in failing.stdout.splitlines() if text.strip().startswith("energy.total"))
    assert re.search(r"\d+\.\d{3} (pJ|nJ|µJ) -> \d+\.\d{3} (pJ|nJ|µJ)", line) and "e+" not in line
    wrong = spiketrace("diff", a, b, "--fail-if", "counts.mac>5nJ", check=False)
    assert wrong.returncode == 2 and "plain number" in wrong.stderr


def test_output_order_is_fixed(training):
    from spiketrace.analyze.counters import count

    with open_trace(training) as trace:
        frames = [count(trace, ["mac", "flop"], chunk_events=50).frame for _ in range(3)]  # many chunks, two threads
    for frame in frames:
        assert frame.equals(frames[0])
        position = {"mac": 0, "flop": 1}
        keys = list(zip(frame["counter"].map(position), frame["scope"], frame["op"]))
        assert keys == sorted(keys)  # counters as asked, then scope, then op
    outputs = {spiketrace("counts", training, "--format", fmt).stdout for fmt in ("json",) for _ in range(2)}
    assert len(outputs) == 1


def test_layers_show_their_class_and_dead_layers_are_flagged(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), neuron.IFNode(v_threshold=1e9), nn.Linear(4, 3), neuron.IFNode())
    with Recorder(tmp_path / "dead", model=model) as rec, rec.stage("forward"), torch.no_grad():
        model(torch.rand(5, 6))  # the first IF never reaches its threshold: a dead layer
    counts = spiketrace("counts", tmp_path / "dead", "--counter", "flop").stdout
    assert "  0 (Linear)" in counts and "  1 (IFNode)" in counts  # not a bare "0"
    energy_table = spiketrace("energy", tmp_path / "dead", "--by", "module").stdout
    assert "Sequential.0 (Linear)" in energy_table
    spiketrace("report", tmp_path / "dead", "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    rates = page[page.index("Spike rates per layer"):]
    row = rates[rates.index("Sequential.1"):rates.index("</tr>", rates.index("Sequential.1"))]
    assert "IFNode" in row and "dead: never fired" in row
    assert "Not spiking (outputs not 0/1): Sequential.0 (Linear), Sequential.2 (Linear)" in rates


def test_units_choice_fixes_the_energy_unit(training):
    with open_trace(training) as trace:
        total = energy(trace, "neuromc").energy_total_pj
    shown = spiketrace("energy", training, "--units", "nJ").stdout.splitlines()
    assert shown[0].endswith(f"{total / 1e3:,.3f} nJ")
    rows = [line for line in shown[2:] if line and not line.startswith("(")]
    assert rows and all(" nJ " in row for row in rows)
