"""NeuroMC maps a large trace a piece at a time on the default path (energy(trace, "neuromc"),
Analysis, `spiketrace energy TRACE`): ranks packed, a large rank a range of steps at a time
(analyze/trace/step_ranges.py record_shards, shown_in_ranges), and gives the activity and
report of the trace mapped whole.

Traces: two ranks of three training steps (tests/training_runs.py, SGD with momentum), and one
rank trained with RMSprop, an optimizer NeuroMC has no model for (a refusal and uncosted
optimizer rows). `shard_events=1` cuts every rank into one range per step; a huge one maps the
trace whole. Every number must be equal (energies to 1e-9 relative), every row in the same
order, and the refusals, warnings and uncosted rows worded the same.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from spikingjelly.activation_based import functional
from torch import nn

import spiketrace.analyze.trace.step_ranges
from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import energy, map_activity, recost
from spiketrace.analyze.trace.step_ranges import record_shards
from spiketrace.capture import Recorder
from tests.training_runs import batches, build, record_ranks

STEPS = 3
WHOLE = 10**15  # shard_events: never cut
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # model scope: training traces, on purpose


def record_rmsprop(path):
    """One rank of STEPS training steps under RMSprop (NeuroMC models SGD and Adam only)."""
    net = build()
    optimizer = torch.optim.RMSprop(net.parameters(), lr=0.01)
    with Recorder(path, model=net, optimizer=optimizer, keep_binary_inputs=True) as recorder:
        for x, target in batches(0, STEPS):
            optimizer.zero_grad()
            with recorder.stage("forward"):
                out = net(x)
            with recorder.suspend():
                loss = nn.functional.mse_loss(out, target)
            with recorder.stage("backward"):
                loss.backward()
            with recorder.stage("optimizer"):
                optimizer.step()
            with recorder.suspend():
                functional.reset_net(net)
            recorder.step()
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("step_ranges")
    return {"training": str(record_ranks(root / "training", STEPS, ranks=2)),
            "rmsprop": str(record_rmsprop(root / "rmsprop"))}


def assert_close(got, expected, where="report"):
    """Equal JSON documents, floats to 1e-9 relative."""
    if isinstance(expected, float) and isinstance(got, (int, float)):
        assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12), where
    elif isinstance(expected, dict):
        assert list(got) == list(expected), where  # the same keys in the same order
        for key in expected:
            assert_close(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), where
        for i, (a, b) in enumerate(zip(got, expected)):
            assert_close(a, b, f"{where}[{i}]")
    else:
        assert got == expected, where


def test_the_pieces_hold_every_record_once(traces):
    with open_trace(traces["training"]) as trace:
        events = trace.count("events")
        per_rank = [p.rows for p in trace.parts["events"] if p.rank == 0]
        assert record_shards(trace, events) == []  # small enough: the trace as it is
        pieces = record_shards(trace, 1)
        assert [ranks for ranks, _ in pieces] == [(0,)] * STEPS + [(1,)] * STEPS
        assert [records is not None for _, records in pieces] == [True] * (2 * STEPS)
        packed = record_shards(trace, events - 1)  # two ranks that do not fit together: one piece each
        assert packed == [((0,), None), ((1,), None)] and sum(per_rank) < events


@pytest.mark.parametrize("trace, options", [
    ("training", {}),
    ("training", {"compat": "spikingjelly"}),
    ("training", {"stage": "backward", "compat": "spikingjelly"}),
    ("training", {"step": [0, 2], "rank": 1}),
    ("training", {"recompute": "exclude"}),
    ("rmsprop", {}),
    ("rmsprop", {"compat": "spikingjelly"}),
])
@pytest.mark.parametrize("shard_events", [1, "ranks"])
def test_mapped_in_pieces_equals_mapped_whole(traces, trace, options, shard_events):
    with open_trace(traces[trace]) as opened:
        events = opened.count("events")
        limit = events - 1 if shard_events == "ranks" else shard_events
        whole = map_activity(opened, "neuromc", shard_events=WHOLE, **options)
        pieces = map_activity(opened, "neuromc", shard_events=limit, **options)
        # the views show every record again, and the part footers count them
        assert opened.count("events") == events == opened.sql("SELECT count(*) AS n FROM events")["n"][0]
        assert opened.con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = "
                                  "'spiketrace_whole_rank'").fetchone()[0] == 0
        expected, got = energy(opened, "neuromc", activity=whole, **options), \
            energy(opened, "neuromc", activity=pieces, **options)
    pd.testing.assert_frame_equal(pieces.kinds, whole.kinds)
    pd.testing.assert_frame_equal(pieces.fragments, whole.fragments)
    pd.testing.assert_frame_equal(pieces.memory, whole.memory)
    pd.testing.assert_frame_equal(pieces.uncosted, whole.uncosted)
    assert (pieces.refusals, pieces.warnings) == (whole.refusals, whole.warnings)
    assert whole.refusals or trace == "training"
    pd.testing.assert_frame_equal(got.to_frame(), expected.to_frame(), rtol=1e-9, check_dtype=False)
    assert_close(json.loads(json.dumps(got.to_json(), default=str)),
                 json.loads(json.dumps(expected.to_json(), default=str)))


def test_rmsprop_is_refused_and_uncosted_once(traces):
    with open_trace(traces["rmsprop"]) as trace:
        activity = map_activity(trace, "neuromc", shard_events=1)
    refused = [r for r in activity.refusals if "RMSprop" in r]
    assert len(refused) == 1
    rows = activity.uncosted[activity.uncosted["kind"] == "optimizer"]
    assert rows["name"].tolist() == ["RMSprop"] and rows["calls"].tolist() == [STEPS]  # one per step() call


def test_recost_and_bulk_sweeps_equal_the_whole_mapping(traces):
    sweep = {"mac_cost_pj.wg": [0.3, 0.9], "memory_instances.sram_6MB.r_cost": [0.5, 2.0]}
    with open_trace(traces["training"]) as trace:
        for presets, swept in ((["neuromc-like-v1"], None), (None, sweep)):
            whole = recost(trace, "neuromc", presets, sweep=swept, shard_events=WHOLE)
            pieces = recost(trace, "neuromc", presets, sweep=swept, shard_events=1)
            pd.testing.assert_frame_equal(pieces, whole, rtol=1e-9, check_dtype=False)


@pytest.mark.parametrize("output", [["--by", "step"], ["--format", "csv"], ["--format", "json"]])
def test_the_command_line_prints_the_whole_mapping(traces, monkeypatch, output):
    """`spiketrace energy TRACE` maps one trace in pieces past SHARD_EVENTS events, as printed
    whole (the table's values are rounded, csv and json compared to 1e-9)."""
    arguments = ["energy", traces["training"], "--model", "neuromc", *output]
    monkeypatch.setattr(spiketrace.analyze.trace.step_ranges, "SHARD_EVENTS", WHOLE)
    whole = CliRunner().invoke(main, arguments)
    monkeypatch.setattr(spiketrace.analyze.trace.step_ranges, "SHARD_EVENTS", 1)
    pieces = CliRunner().invoke(main, arguments)
    assert whole.exit_code == pieces.exit_code == 0, pieces.output
    assert pieces.stderr == whole.stderr
    if "json" in output:
        assert_close(json.loads(pieces.stdout), json.loads(whole.stdout))
    elif "csv" in output:
        from io import StringIO

        pd.testing.assert_frame_equal(pd.read_csv(StringIO(pieces.stdout)), pd.read_csv(StringIO(whole.stdout)),
                                      rtol=1e-9)
    else:
        assert pieces.stdout == whole.stdout and "step" in whole.stdout


def test_pieces_of_a_selection_shown_in_the_views(traces):
    """Within selected_views (`spiketrace sql --step`), the pieces are pieces of the selection,
    and the selection is shown again afterwards."""
    from spiketrace.analyze.trace.views import selected_views

    with open_trace(traces["training"]) as trace, selected_views(trace.con, step=1):
        shown = trace.sql("SELECT count(*) AS n FROM events")["n"][0]
        whole = energy(trace, "neuromc", shard_events=WHOLE).to_frame()
        pieces = energy(trace, "neuromc", shard_events=1).to_frame()
        assert trace.sql("SELECT count(*) AS n FROM events")["n"][0] == shown < trace.count("events")
    pd.testing.assert_frame_equal(pieces, whole, rtol=1e-9, check_dtype=False)
    assert whole[whole["breakdown"] == "step"]["key"].tolist() == ["1"]
