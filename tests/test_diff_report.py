"""`spiketrace diff` and `spiketrace report`: numbers against the Python API, --fail-if by
hand, and the HTML report rendered in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
import torch
from click.testing import CliRunner
from spikingjelly.activation_based import neuron
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import count
from spiketrace.analyze.energy import energy
from spiketrace.analyze.present.diff import ConditionError, diff_traces
from spiketrace.capture import Recorder


def record(path, hidden: int, seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, hidden), neuron.IFNode(), nn.Linear(hidden, 4), neuron.IFNode())
    x = (torch.rand(6, 10) > 0.5).float()
    with Recorder(path, model=model) as recorder:
        with recorder.stage("forward"), torch.no_grad():
            model(x)
    return path


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    return record(root / "a", hidden=8), record(root / "b", hidden=16)


def test_diff_numbers_are_the_apis(pair):
    a_path, b_path = pair
    with open_trace(a_path) as a, open_trace(b_path) as b:
        result = diff_traces(a, b)
        macs = [count(t, ["mac"]).totals()["mac"] for t in (a, b)]
        totals = [energy(t, "compute").energy_total_pj for t in (a, b)]
    assert not result.same_model
    assert set(result.changed_modules()) == {"Sequential.0", "Sequential.2"}  # Linear(10, 8) -> Linear(10, 16)
    row = result.value("counts.mac")
    assert (row["a"], row["b"], row["delta"]) == (macs[0], macs[1], macs[1] - macs[0])
    total = result.value("energy.total")
    assert total["relative"] == pytest.approx((totals[1] - totals[0]) / totals[0])
    assert result.value("spike_rate.Sequential.1")["a"] >= 0


def test_fail_if_conditions_by_hand(pair):
    a_path, b_path = pair
    with open_trace(a_path) as a, open_trace(b_path) as b:
        result = diff_traces(a, b)
    change = 100 * result.value("energy.total")["relative"]
    assert change > 5  # twice the hidden width costs more
    assert result.failures(["energy.total>+5%"]) and not result.failures([f"energy.total>+{change + 1:.3f}%"])
    assert result.failures(["energy.total<=-0%"]) == []
    delta = result.value("counts.mac")["delta"]
    assert result.failures([f"counts.mac>{delta - 1}"]) and not result.failures([f"counts.mac>={delta + 1}"])
    with pytest.raises(ConditionError, match="no compared metric 'energy.totl'"):
        result.failures(["energy.totl>5%"])
    with pytest.raises(ConditionError, match="expected METRIC"):
        result.failures(["energy.total is big"])


def test_diff_cli(pair):
    a_path, b_path = pair
    runner = CliRunner()
    same = runner.invoke(main, ["diff", str(a_path), str(a_path), "--fail-if", "energy.total>+0.001%"])
    assert same.exit_code == 0 and "same model" in same.output
    failed = runner.invoke(main, ["diff", str(a_path), str(b_path), "--fail-if", "energy.total>+5%", "--format", "json"])
    assert failed.exit_code == 1
    document = json.loads(failed.stdout)
    assert document["model"]["same"] is False and len(document["failed_conditions"]) == 1
    bad = runner.invoke(main, ["diff", str(a_path), str(b_path), "--fail-if", "nonsense"])
    assert bad.exit_code == 2 and "error:" in bad.output


def browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_report_renders_in_headless_chromium(pair, tmp_path):
    binary = browser()
    if binary is None:
        if os.environ.get("SPIKETRACE_REQUIRE_BROWSER"):
            pytest.fail("SPIKETRACE_REQUIRE_BROWSER is set but no chromium is installed")
        pytest.skip("no chromium here (.ci/run installs Debian's chromium)")
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(pair[1]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "http" not in re.sub(r'xmlns[^ >]*|https?://doi[^ <"]*', "", page).split("<body", 1)[0]  # no fetched resource
    flags = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000"]
    dom = subprocess.run([*flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120).stdout
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-errors=""' in body  # no script error
    total = int(re.search(r'data-images-total="(\d+)"', body).group(1))
    # every plot decoded: energy by layer, stages, spike rates, roofline and the chips-and-paper comparison
    assert total == 5 and f'data-images-loaded="{total}"' in body
    assert "<title>spiketrace report: b</title>" in dom
    assert dom.count("<tr>") > 10  # the breakdown tables have rows
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, "--window-size=1280,2000", f"--screenshot={shot}", out.as_uri()],
                   capture_output=True, timeout=120, check=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank one
