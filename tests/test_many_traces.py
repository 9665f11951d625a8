"""Several traces at once: `spiketrace counts|energy TRACE...` (or a directory of traces) adds
them up, `--by trace` shows each, and spiketrace.analyze.many gives both from Python.

The sweep: seed=2 (two ranks, two training steps) and seed=10 (one rank, one step), in one
directory; natural order puts seed=2 first. Each trace's part of a combination must equal
that trace counted or costed alone, and the parts must add up to the combination.
"""

from __future__ import annotations

import io
import json
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

from spiketrace.analyze import many, open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import count
from spiketrace.analyze.energy import energy
from spiketrace.analyze.many import find_traces
from tests.training_runs import record, record_ranks

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # model scope: training traces, on purpose


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("many") / "sweep"
    record(root / "seed=10", 1)
    record_ranks(root / "seed=2", 2, ranks=2)
    (root / "notes").mkdir()  # not a trace: left out of the directory's traces
    return root


def in_order(frame):
    """Rows in one order: some counters and models list theirs in their query's order."""
    return frame.sort_values(list(frame.columns[:3]), kind="stable", ignore_index=True)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_a_directory_names_its_traces_in_natural_order(sweep):
    assert find_traces(sweep) == [str(sweep / "seed=2"), str(sweep / "seed=10")]
    assert find_traces([sweep / "seed=10", str(sweep / "seed=2")]) == [str(sweep / "seed=10"), str(sweep / "seed=2")]
    assert run("counts", sweep).stdout == run("counts", sweep / "seed=2", sweep / "seed=10").stdout


def test_counts_add_up_and_each_trace_equals_it_counted_alone(sweep):
    combined = many.count(sweep)
    for label, result in combined.by_trace.items():
        with open_trace(label) as trace:
            pd.testing.assert_frame_equal(in_order(result.frame), in_order(count(trace).frame))
    by_trace = combined.totals_by_trace()
    assert by_trace.groupby("counter")["value"].sum().to_dict() == combined.total.totals()
    assert [f.document["ranks"] for f in combined.traces] == [[0, 1], [0]]


def test_counts_by_trace_in_every_format(sweep):
    table = run("counts", sweep, "--by", "trace", "--counter", "flop,mac")
    assert table.exit_code == 0, table.output
    rows = [line.split() for line in table.stdout.split("\n\n")[0].splitlines()]
    assert [r[0] for r in rows] == ["trace", str(sweep / "seed=2"), str(sweep / "seed=10"), "total"]
    tidy = pd.read_csv(io.StringIO(run("counts", sweep, "--by", "trace", "--format", "csv").stdout))
    added = pd.read_csv(io.StringIO(run("counts", sweep, "--format", "csv").stdout))
    assert set(tidy["trace"]) == {str(sweep / "seed=2"), str(sweep / "seed=10")}
    assert tidy.groupby(["counter", "scope", "op"])["value"].sum().to_dict() == \
        added.set_index(["counter", "scope", "op"])["value"].to_dict()
    document = json.loads(run("counts", sweep, "--format", "json", "--counter", "flop").stdout)
    assert [t["label"] for t in document["traces"]] == [str(sweep / "seed=2"), str(sweep / "seed=10")]
    assert sum(t["totals"]["flop"] for t in document["traces"]) == document["counters"]["flop"]["total"]
    assert {"path", "ranks", "events", "degraded"} <= set(document["traces"][0])


@pytest.mark.parametrize("model", ["compute", "neuromc"])
def test_energy_adds_up_and_each_trace_equals_it_costed_alone(sweep, model):
    combined = many.energy(sweep, model)
    alone = {}
    for label in combined.by_trace:
        with open_trace(label) as trace:
            alone[label] = energy(trace, model).energy_total_pj
            pd.testing.assert_frame_equal(in_order(combined.by_trace[label]), in_order(energy(trace, model).to_frame()))
    assert combined.energy_total_pj == pytest.approx(sum(alone.values()), rel=1e-12)
    stage = combined.frame[combined.frame["breakdown"] == "stage"]
    assert stage["pj"].sum() == pytest.approx(combined.energy_total_pj, rel=1e-9)  # the breakdowns still add up
    table = run("energy", sweep, "--model", model, "--by", "trace")
    assert table.exit_code == 0 and "(2 traces, added up)" in table.stdout.splitlines()[0]
    assert [line.split()[0] for line in table.stdout.splitlines()[2:]] == list(combined.by_trace)
    document = json.loads(run("energy", sweep, "--model", model, "--format", "json").stdout)
    assert document["energy_total_pj"] == pytest.approx(sum(t["energy_total_pj"] for t in document["traces"]))


def test_sizes_of_hardware_are_not_added(sweep):
    """Lemaire's buffer capacities combine by max (the largest any trace needs); SpikeSim's area
    is that of one network's crossbars, so a combination of several traces has none."""
    lemaire = many.energy(sweep, "lemaire")
    buffers = {label: frame[frame["breakdown"] == "buffer"].set_index("key")["count"]
               for label, frame in lemaire.by_trace.items()}
    combined = lemaire.frame[lemaire.frame["breakdown"] == "buffer"].set_index("key")["count"]
    assert combined.to_dict() == pd.concat(buffers.values(), axis=1).max(axis=1).to_dict()
    spikesim = many.energy(sweep, "spikesim")
    assert not spikesim.frame["breakdown"].eq("area").any()
    assert all(frame["breakdown"].eq("area").any() for frame in spikesim.by_trace.values())


def test_what_cannot_be_combined_is_refused_in_one_line(sweep, tmp_path, monkeypatch):
    twice = run("counts", sweep / "seed=2", sweep / "seed=2" / ".")
    assert twice.exit_code == 2 and "name each trace once" in twice.output
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run("counts", empty).exit_code == 2 and "none of its subdirectories" in run("counts", empty).output
    from spiketrace.capture import record_inference
    from tests.training_runs import batches, build

    net = build()
    record_inference(tmp_path / "inference", net, next(batches(0, 1))[0])
    mixed = run("energy", sweep / "seed=10", tmp_path / "inference")
    assert mixed.exit_code == 2 and "different energy models" in mixed.output and "--model" in mixed.output
    assert run("energy", sweep / "seed=10", tmp_path / "inference", "--model", "compute").exit_code == 0
    both = run("counts", sweep, "--scheduler", "tcp://127.0.0.1:1", "--workers", "2")
    assert both.exit_code == 2 and "exclude each other" in both.output
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the cluster extra were not installed
    missing = run("counts", sweep, "--engine", "dask")
    assert missing.exit_code == 2 and "pip install -e '.[cluster]'" in missing.output
