"""What the capture said about itself reaches whoever reads the numbers: a degraded capture
(its own failures: the numbers miss that work), torch.compile seen (the eager graph was
recorded) and SpikingJelly tracker underflows are said by info, counts, energy, validate and
the report, on stderr for tables (stdout stays the table) and as keys in JSON."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from spiketrace.analyze.cli import main
from spiketrace.analyze.present.health import SHOWN_KINDS, degraded_line, health_lines
from spiketrace.analyze.present.report import build_report
from spiketrace.capture import Recorder
from tests.real_jobs.tracefiles import run_job

# The job's injected failure: the capture cannot describe a convolution, forward or backward.
FIRST = "1 at dispatch (aten.convolution.default: ValueError: injected: describing a convolution fails)"


@pytest.fixture(scope="module")
def unhealthy(tmp_path_factory):
    out = tmp_path_factory.mktemp("unhealthy")
    job = run_job("unhealthy_capture.py", out)
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    if "skip" in result:
        pytest.skip(result["skip"])
    return out / "trace"


@pytest.fixture(scope="module")
def sound(tmp_path_factory):
    path = tmp_path_factory.mktemp("sound") / "trace"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    with Recorder(path, model=model) as recorder, recorder.stage("forward"):
        model(torch.rand(2, 4)).sum().backward()
    return path


def run(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args])


def test_tables_say_degraded_on_stderr_first(unhealthy):
    for command in (["info"], ["counts", "--counter", "mac"], ["energy", "--model", "compute"], ["validate"],
                    ["report", "--model", "compute", "--out", unhealthy.parent / "report.html"]):
        shown = run(command[0], unhealthy, *command[1:])
        assert shown.exit_code == 0, (command, shown.output)
        first, *others = shown.stderr.splitlines()
        assert first.startswith(f"DEGRADED: capture failed 2 times: {FIRST}, 1 at dispatch "
                                "(aten.convolution_backward.default"), command
        assert first.endswith("; the numbers miss the work it did not record")
        assert any(line.startswith("warning: torch.compile was used while capturing") for line in others), command
        assert any("tracker would have aborted this run (active_modules stack underflow at CrossEntropyLoss x1)" in line
                   for line in others), command
        assert "DEGRADED: capture failed 2 times:" not in shown.stdout  # the table stays clean for pipes
    head = run("info", unhealthy).stdout.split("\n\n")[0]  # the facts, before the first blank line
    facts = dict(line.split(None, 1) for line in head.splitlines())
    assert facts["capture"] == "DEGRADED: capture failed 2 times (2 kinds)"
    assert facts["torch.compile"] == "yes (eager graph recorded)"  # the user's torch.compile, seen
    assert facts["tracker_underflows"] == "CrossEntropyLoss x1"


def test_json_documents_carry_the_health(unhealthy):
    info = json.loads(run("info", unhealthy, "--format", "json").stdout)["trace"]
    counts = json.loads(run("counts", unhealthy, "--counter", "mac", "--format", "json").stdout)["trace"]
    energy = json.loads(run("energy", unhealthy, "--model", "compute", "--format", "json").stdout)["trace"]
    for document in (info, counts, energy):
        [(rank, entries)] = document["degraded"].items()
        assert rank == "0" and [(e["site"], e["what"], e["count"]) for e in entries] == [
            ("dispatch", "aten.convolution.default", 1), ("dispatch", "aten.convolution_backward.default", 1)]
        assert document["compiled"] is True and any("OptimizedModule" in s for s in document["compiled_seen"])
        assert [u["tracker_name"] for u in document["tracker_underflows"]] == ["CrossEntropyLoss"]
    # what the DEGRADED line warns of: the convolution the capture failed to record is not counted
    ops = {row["op"] for row in json.loads(run("info", unhealthy, "--format", "json").stdout)["ops"]}
    assert "aten.convolution.default" not in ops and "aten.addmm.default" in ops


def test_validate_passes_a_degraded_trace_unless_strict(unhealthy, sound):
    shown = run("validate", unhealthy)
    assert shown.exit_code == 0 and shown.stdout.startswith("OK (degraded: capture failed 2 times (2 kinds)): ")
    strict = run("validate", unhealthy, "--strict")
    assert strict.exit_code == 1 and strict.stderr.splitlines()[-1] == "error: strict: the capture was degraded"
    assert strict.stdout.startswith("OK (degraded: ")  # the checks themselves passed
    for args in ([], ["--strict"]):
        clean = run("validate", sound, *args)
        assert clean.exit_code == 0 and clean.stdout.startswith("OK: ") and clean.stderr == ""


def test_report_opens_with_a_banner_and_findings(unhealthy, sound):
    page = build_report(unhealthy, model="compute")
    banner = page.index('<p class="banner" id="degraded" role="alert">DEGRADED: capture failed 2 times: ')
    assert banner < page.index('<section id="summary">')
    findings = page[page.index('<ul class="findings">'):]
    assert findings.index("<strong>capture degraded</strong>") < findings.index("<strong>torch.compile</strong>") \
        < findings.index("<strong>tracker underflow</strong>") < findings.index("</ul>")
    assert "<dt>torch.compile</dt><dd>yes (eager graph recorded)</dd>" in page
    assert "<dt>compiled_record</dt><dd>" in page  # spiketrace's own compiled record, apart
    assert "<dt>tracker_underflows</dt><dd>CrossEntropyLoss x1</dd>" in page
    clean = build_report(sound, model="compute")
    assert 'class="banner"' not in clean and "<dt>capture</dt><dd>sound</dd>" in clean


def test_a_sound_trace_says_nothing(sound):
    for command in (["info"], ["counts", "--counter", "mac"]):
        shown = run(command[0], sound, *command[1:])
        assert shown.exit_code == 0 and shown.stderr == "", (command, shown.stderr)


def test_the_degraded_line_names_ranks_and_counts_what_it_does_not_show():
    entry = {"site": "statistics", "what": "nnz", "error": "RuntimeError: boom", "count": 3, "first_seq": 7}
    assert degraded_line({"degraded": {"1": [entry]}}) == (
        "DEGRADED: capture failed 3 times on rank 1 at statistics (nnz: RuntimeError: boom); "
        "the numbers miss the work it did not record")
    many = [{**entry, "what": f"op{i}", "count": i + 1} for i in range(SHOWN_KINDS + 2)]
    line = degraded_line({"degraded": {"0": many}})
    assert line.startswith(f"DEGRADED: capture failed {sum(range(1, SHOWN_KINDS + 3))} times: "
                           f"{SHOWN_KINDS + 2} at statistics (op{SHOWN_KINDS + 1}: ")  # the most frequent first
    assert ", and 2 more kinds (spiketrace info --format json);" in line
    assert health_lines({"degraded": {}, "compiled": False, "tracker_underflows": []}) == []
