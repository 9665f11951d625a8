"""Output order is fixed: every command prints the same bytes when run
twice, and the presentation orders rows by their keys whatever order the engine returned them
in: counts counted in one chunk or in many (the threaded engine, chunks prefetched by a worker
thread) print identically, and every energy model lists stages in running order."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count
from spiketrace.analyze.present.counts import counts_json, table_text, tidy_frame
from spiketrace.analyze.present.energy_table import ordered_frame
from spiketrace.analyze.present.report import spike_rates
from tests.training_runs import record, record_ranks

MODELS = ("compute", "neuromc", "lemaire", "spikesim")


def spiketrace(*args) -> str:
    done = subprocess.run(["spiketrace", *map(str, args)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (args, done.stderr[-2000:])
    return done.stdout


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """Two ranks, two steps: rows of several ranks, steps and stages to order."""
    return record_ranks(tmp_path_factory.mktemp("order") / "train", 2, ranks=2)


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("order") / "one", 1)


COMMANDS = [
    ["counts", "{t}", "--format", "json"],  # every counter, neuron_state's detail tables too
    ["counts", "{t}", "--format", "csv", "--by", "stage"],
    ["counts", "{t}", "--by", "module-type"],
    ["counts", "{t}", "{o}", "--by", "trace", "--format", "csv"],
    *[["energy", "{t}", "--model", model, "--format", "csv"] for model in MODELS],
    ["energy", "{t}", "--format", "json"],
    ["energy", "{t}", "--by", "module"],
    ["info", "{t}", "--format", "json"],
    ["info", "{t}"],
    ["diff", "{o}", "{t}", "--format", "json"],
    ["diff", "{o}", "{t}"],
    ["collectives", "{t}", "--format", "csv"],
    ["validate", "{t}", "--format", "json"],
    ["presets", "list"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:1] + c[2:]) for c in COMMANDS])
def test_each_command_prints_the_same_bytes_twice(trace, other, command):
    args = [a.format(t=trace, o=other) for a in command]
    first, second = spiketrace(*args), spiketrace(*args)
    assert first == second and first


def test_the_report_page_is_the_same_twice(trace, tmp_path):
    pages = []
    for name in ("a.html", "b.html"):
        spiketrace("report", trace, "--out", tmp_path / name)
        pages.append((tmp_path / name).read_text())
    assert pages[0] == pages[1]
    # its spike rates: one row per layer and stage, all ranks together (not one per rank, in query order)
    with open_trace(trace) as opened:
        rates, _ = spike_rates(opened)
    keys = list(zip(rates["scope"], rates["stage"]))
    assert keys == sorted(set(keys)) and len(keys) == len(set(keys))


def test_counts_print_alike_from_one_chunk_or_many_threaded(trace):
    with open_trace(trace) as opened:
        results = [count(opened, chunk_events=chunk, by=by) for chunk in (50, 500_000) for by in ((), ("stage",))]
        texts = []
        for result in results:
            frame = tidy_frame(result)
            texts.append((frame.to_csv(index=False), json.dumps(counts_json(result, opened)),
                          table_text(result, "op", top=5), table_text(result, "scope")))
    assert texts[0] == texts[2]  # one chunk per (rank, op range) or 50 events each: the same bytes
    assert texts[1][0] == texts[3][0]


def test_every_model_lists_stages_in_running_order(trace):
    for model in MODELS:
        frame = pd.read_csv(io.StringIO(spiketrace("energy", trace, "--model", model, "--format", "csv")))
        stages = list(frame.loc[frame["breakdown"] == "stage", "key"])
        running = [s for s in ("forward", "backward", "optimizer", "eval") if s in stages]
        assert stages[:len(running)] == running, (model, stages)
        for breakdown in ("step", "rank"):
            keys = list(frame.loc[frame["breakdown"] == breakdown, "key"].astype(int))
            assert keys == sorted(keys), (model, breakdown, keys)


def test_ordered_frame_sorts_keys_from_the_trace_and_keeps_the_models_own():
    frame = pd.DataFrame({"breakdown": ["total", "component", "component", "stage", "stage", "stage", "module", "module",
                                        "step", "step"],
                          "key": ["t", "mac_pj", "ac_pj", "eval", "optimizer", "forward", "Net.10", "Net.2", "10", "2"],
                          "pj": range(10)})
    # the model's components as it lists them; stages in running order, modules and steps by name and number
    assert list(ordered_frame(frame)["key"]) == ["t", "mac_pj", "ac_pj", "forward", "optimizer", "eval", "Net.2",
                                                 "Net.10", "2", "10"]
