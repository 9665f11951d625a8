"""What a new user sees on a first run, through the real CLI: `info` says torch.compile and
spiketrace's own compiled record apart; a capture without the C extension names no compiled
fast path; the demo's module table says "—" where a scope has no spike rate, and its next
commands come one a line; torch.profiler's markers stay out of the op tables."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

import spiketrace.capture.native
from spiketrace.analyze.cli import main
from spiketrace.capture import Recorder
from spiketrace.capture.session.fast_paths import COMPILED, ENVIRONMENT_VARIABLE, FAST_PATHS

MARKERS = {"profiler._record_function_enter_new.default", "profiler._record_function_exit._RecordFunction"}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def record_small(path):
    net = nn.Sequential(nn.Linear(3, 2))
    with Recorder(path, model=net) as recorder, recorder.stage("forward"):
        net(torch.ones(1, 3))
    return path


def info_facts(path) -> dict[str, str]:
    shown = run("info", path)
    assert shown.exit_code == 0, shown.output
    head = shown.stdout.split("\n\n")[0]  # the facts, before the first blank line
    return dict(line.split(None, 1) for line in head.splitlines())


def manifest_settings(path) -> dict:
    return json.loads((path / "manifest.json").read_text())["settings"]


def test_info_says_torch_compile_and_the_compiled_record_apart(tmp_path, monkeypatch):
    facts = info_facts(record_small(tmp_path / "built"))
    assert "compiled" not in facts  # read as "the C extension was not built"
    assert facts["torch.compile"] == "no"
    assert facts["compiled_record"] == ("yes" if spiketrace.capture.native.AVAILABLE else
                                        "no (the C extension was not built: Python record)")
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "native_record")
    if spiketrace.capture.native.AVAILABLE:
        switched_off = info_facts(record_small(tmp_path / "switched_off"))
        assert switched_off["compiled_record"] == "no (switched off: SPIKETRACE_SLOW_PATHS)"
    monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    monkeypatch.setattr(spiketrace.capture.native, "AVAILABLE", False)  # an install built without a compiler
    unbuilt = info_facts(record_small(tmp_path / "unbuilt"))
    assert unbuilt["compiled_record"] == "no (the C extension was not built: Python record)"
    assert unbuilt["torch.compile"] == "no"


def test_without_the_extension_the_manifest_names_no_compiled_fast_path(tmp_path, monkeypatch):
    monkeypatch.setattr(spiketrace.capture.native, "AVAILABLE", False)
    settings = manifest_settings(record_small(tmp_path / "t"))
    assert settings["native"] is False
    assert settings["fast_paths"] == sorted(set(FAST_PATHS) - COMPILED) == ["interned_arguments",
                                                                             "propagated_statistics"]
    assert settings["scan_threads"] == 1  # shared_scans is compiled: no scan was shared
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "native_record")  # a compiled path's name is still known
    assert manifest_settings(record_small(tmp_path / "u"))["fast_paths"] == ["interned_arguments",
                                                                             "propagated_statistics"]


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory):
    shown = CliRunner().invoke(main, ["demo", str(tmp_path_factory.mktemp("demo") / "demo"), "--force"])
    assert shown.exit_code == 0, shown.output
    return shown.stdout


def test_the_demo_module_table_says_dash_where_no_spike_rate(demo_output):
    assert "NaN" not in demo_output
    table = demo_output.split("output spike rate")[1].split("\n\n")[0].splitlines()[2:]  # past the header
    rates = {row.split()[0]: row.split()[-1] for row in table}
    # the SpikingMLP's Linear layers, the model and Global have no binary output: no spike rate
    assert {rates[s] for s in ("Global", "SpikingMLP", "SpikingMLP.fc1", "SpikingMLP.fc2")} == {"—"}
    assert all(0 < float(rates[s]) < 1 for s in ("SpikingMLP.sn1", "SpikingMLP.sn2"))  # the LIF neurons'


def test_the_demo_suggests_one_command_a_line(demo_output):
    assert " | " not in demo_output  # read as a shell pipe
    tail = demo_output.rstrip("\n").split("\n\nnext, try:\n")[1].splitlines()
    assert [line.split()[:2] for line in tail] == [["spiketrace", "counts"], ["spiketrace", "energy"],
                                                   ["spiketrace", "report"]]


def test_profiler_markers_are_in_no_op_table(tmp_path):
    with Recorder(tmp_path / "t") as recorder, recorder.stage("forward"):
        with torch.profiler.record_function("x"):
            torch.full((3,), 2.0).neg()
    shown = run("info", tmp_path / "t")
    assert shown.exit_code == 0, shown.output
    ops_table = shown.stdout.split("\nops:\n")[1].split("\n\n")[0]
    assert "profiler." not in ops_table and "aten.neg.default" in ops_table
    markers = shown.stdout.split("\nprofiler markers")[1].split("\n\n")[0]
    assert all(marker in markers for marker in MARKERS)
    document = json.loads(run("info", tmp_path / "t", "--format", "json").stdout)
    assert {row["op"] for row in document["markers"]} == MARKERS
    assert sum(row["count"] for row in document["ops"]) == document["trace"]["counts"]["events"]  # every event
    # neuron_state lists every op it saw (SpikingJelly's get_counts), the markers at 0: not in the op table
    by_op = run("counts", tmp_path / "t", "--by", "op", "--counter", "flop,neuron_state")
    assert by_op.exit_code == 0 and "aten.neg.default" in by_op.stdout and "profiler." not in by_op.stdout
    flop = json.loads(run("counts", tmp_path / "t", "--counter", "flop", "--format", "json").stdout)["counters"]["flop"]
    assert flop["coverage"] == 1.0 and set(flop["not_applicable"]) >= MARKERS  # not uncovered work
