"""Step-range shards (analyze/trace/step_ranges.py): a rank evaluated a range of recorder steps
at a time adds up to the rank evaluated whole, for the counters and models that say so
(STEP_ADDITIVE_COUNTERS, STEP_ADDITIVE_MODELS), in process and on a Dask cluster.

Traces: two ranks of three training steps (tests/training_runs.py: forward, backward, an SGD
step with momentum, an eval forward; the neurons are reset between steps, as SpikingJelly
training does), and one rank of three inference steps whose neurons are never reset, so they
carry their state from step to step. `shard_events=1` cuts every rank into one range per step.
Integers must be equal, energies equal to 1e-9 relative; a report's rows come in the order of
the whole trace's. The last tests show why neuron_state is not split by steps.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from spiketrace.analyze import many, open_trace
from spiketrace.analyze.counters import ALL_COUNTERS, COUNTERS, count
from spiketrace.analyze.energy import energy
from spiketrace.analyze.many import STEP_ADDITIVE_COUNTERS, STEP_ADDITIVE_MODELS, add_counter_results
from spiketrace.analyze.many.shards import CountWork, EnergyWork, Shard, evaluate_shard, plan_shards
from spiketrace.analyze.trace.step_ranges import restrict, step_bounds, step_ranges
from spiketrace.capture import Recorder
from tests.training_runs import batches, build, record_ranks

STEPS = 3
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # model scope: training traces, on purpose


def record_unreset(path):
    """One rank of STEPS inference steps whose neurons keep their state across steps."""
    net = build()
    with Recorder(path, model=net) as recorder:
        for x, _ in batches(0, STEPS):
            with torch.no_grad(), recorder.stage("eval", phase="forward"):
                net(x)
            recorder.step()
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("step_shards")
    return {"training": str(record_ranks(root / "training", STEPS, ranks=2)),
            "unreset": str(record_unreset(root / "unreset"))}


def by_step(path, rank, evaluate):
    """evaluate(trace) for each step of `rank`, each on the rank opened and restricted to it."""
    with open_trace(path, ranks=[rank]) as trace:
        ranges = step_ranges(step_bounds(trace, rank), 1)
    results = []
    for _, records in ranges:
        with open_trace(path, ranks=[rank]) as trace:
            restrict(trace, *records)
            results.append(evaluate(trace))
    return results


def sorted_frame(result):
    return result.frame.sort_values(["counter", "scope", "op"], ignore_index=True)


def test_step_ranges_hold_every_record_once(traces):
    with open_trace(traces["training"]) as trace:
        bounds = {rank: step_bounds(trace, rank) for rank in trace.ranks}
        events = trace.sql("SELECT rank, step, count(*) AS n FROM events GROUP BY ALL ORDER BY ALL")
    assert [[step for step, _, _ in bounds[rank]] for rank in (0, 1)] == [[0, 1, 2]] * 2
    assert [n for rank in (0, 1) for _, n, _ in bounds[rank]] == events["n"].tolist()
    ranges = step_ranges(bounds[0], 1)
    assert [steps for steps, _ in ranges] == [(0, 1), (1, 2), (2, None)]
    assert ranges[0][1][0] is None and ranges[-1][1][1] is None  # open ends: nothing left out
    assert [low for _, (low, _) in ranges[1:]] == [high for _, (_, high) in ranges[:-1]]
    assert len(step_ranges(bounds[0], 10**9)) == 1
    # every table's rows are in exactly one range
    tables = ("events", "event_tensors", "module_events", "stage_markers", "optimizer_steps", "neuron_memories")
    with open_trace(traces["training"], ranks=[0]) as trace:
        whole = [trace.count(table) for table in tables]
    ranged = by_step(traces["training"], 0, lambda t: [t.count(table) for table in tables])
    assert [sum(counts) for counts in zip(*ranged)] == whole and min(min(counts) for counts in ranged) > 0


@pytest.mark.parametrize("trace", ["training", "unreset"])
def test_counters_add_up_over_steps(traces, trace):
    op_counters = [c for c in STEP_ADDITIVE_COUNTERS if c in COUNTERS]
    module_counters = [c for c in STEP_ADDITIVE_COUNTERS if c not in COUNTERS]  # these take no groups
    assert op_counters and module_counters
    for counters, by in ((op_counters, ("stage", "step")), (module_counters, ())):
        for rank in (0, 1) if trace == "training" else (0,):
            with open_trace(traces[trace], ranks=[rank]) as opened:
                whole = count(opened, counters, by=by)
            added = add_counter_results(by_step(traces[trace], rank,
                                                lambda t, counters=counters, by=by: count(t, counters, by=by)))
            pd.testing.assert_frame_equal(sorted_frame(added), sorted_frame(whole), check_dtype=False)
            for name in ("unsupported", "not_applicable"):
                pd.testing.assert_frame_equal(getattr(added, name).reset_index(drop=True),
                                              getattr(whole, name).reset_index(drop=True), check_dtype=False)
            assert (added.selected_events, added.selected_bytes) == (whole.selected_events, whole.selected_bytes)


@pytest.mark.parametrize("model, options", [
    ("compute", {}),
    ("compute", {"compat": "spikingjelly"}),
    ("neuromc", {}),
    ("neuromc", {"stage": "backward", "compat": "spikingjelly"}),
])
def test_models_add_up_over_steps_in_process(traces, model, options):
    """In process, NeuroMC's mapping cuts a rank of more than shard_events events into step
    ranges itself; compute streams, so only the cluster cuts it: its shards are evaluated
    here directly."""
    assert model in STEP_ADDITIVE_MODELS
    path = traces["training"]
    with open_trace(path) as trace:
        whole = energy(trace, model, **options).to_frame()
    if model == "neuromc":
        shards = many.energy(path, model, shard_events=1, **options).frame
    else:
        work = EnergyWork(model, None, (), options, {}, 1)
        with open_trace(path) as trace:
            planned = plan_shards(work, trace, pack=False, verified=False)
        assert len(planned) == 2 * STEPS
        shards = work.add([evaluate_shard(work, path, shard) for shard in planned]).frame
    pd.testing.assert_frame_equal(shards, whole, rtol=1e-9, check_dtype=False)
    steps = shards[shards["breakdown"] == "step"]
    assert steps["key"].tolist() == ["0", "1", "2"]


def test_unreset_neurons_add_up_for_the_models(traces):
    path = traces["unreset"]
    for model in STEP_ADDITIVE_MODELS:
        with open_trace(path) as trace:
            whole = energy(trace, model).to_frame()
        work = EnergyWork(model, None, (), {}, {}, 1)
        added = work.add(by_step(path, 0, work.evaluate)).frame
        pd.testing.assert_frame_equal(added, whole, rtol=1e-9, check_dtype=False)


def test_plan_cuts_large_ranks_into_step_ranges(traces):
    path = traces["training"]
    neuromc = EnergyWork("neuromc", None, (), {}, {}, 1)
    with open_trace(path) as trace:
        events = trace.count("events")
        assert plan_shards(EnergyWork("neuromc", None, (), {}, {}, events), trace, pack=True, verified=True) == [Shard()]
        in_process = plan_shards(neuromc, trace, pack=True, verified=True)  # NeuroMC cuts its own trace
        cluster = plan_shards(neuromc, trace, pack=False, verified=False)
        by_rank = plan_shards(EnergyWork("neuromc", None, (), {}, {}, events), trace, pack=False, verified=False)
        selected = plan_shards(EnergyWork("neuromc", None, (), {"step": 1, "rank": 1}, {}, 1), trace, pack=False,
                               verified=False)
        streamed = plan_shards(CountWork(None, {}, {}, 1), trace, pack=True, verified=True)
        state = plan_shards(CountWork(("flop", "neuron_state"), {}, {}, 1), trace, pack=False, verified=False)
        lemaire = plan_shards(EnergyWork("lemaire", None, (), {}, {}, 1), trace, pack=False, verified=False)
    assert [(s.ranks, s.steps) for s in cluster] == [((r,), (s, s + 1 if s < 2 else None)) for r in (0, 1)
                                                     for s in range(STEPS)]
    assert [s.verify for s in cluster] == [True, False, False] * 2  # each rank's parts checked once
    assert in_process == [Shard()]  # energy(trace) maps it a step range at a time (test_step_ranges.py)
    assert [(s.ranks, s.steps) for s in by_rank] == [((0,), None), ((1,), None)]
    assert [(s.ranks, s.steps) for s in selected] == [((1,), (1, 2))]  # only the range holding the step
    assert streamed == [Shard()]  # the counters stream: in process they run whole
    assert [s.steps for s in state] == [None, None]  # neuron_state: whole ranks
    assert lemaire == [Shard()]  # not additive over ranks: the whole trace


def test_a_selected_step_equals_the_whole_trace_selection(traces):
    path = traces["training"]
    with open_trace(path) as trace:
        whole = energy(trace, "neuromc", step=[0, 2], rank=0).to_frame()
    shards = many.energy(path, "neuromc", step=[0, 2], rank=0, shard_events=1).frame
    pd.testing.assert_frame_equal(shards, whole, rtol=1e-9, check_dtype=False)


def test_neuron_state_does_not_add_up_over_steps_without_a_reset(traces):
    """Why neuron_state is not in STEP_ADDITIVE_COUNTERS: which storages hold neuron state is
    replayed along the op stream, and neurons that are not reset carry theirs (snapshots and
    state-writing outputs of the step before) into the next step, which a range of steps does
    not see. Over ranks it adds up: no state crosses processes."""
    assert "neuron_state" in ALL_COUNTERS and "neuron_state" not in STEP_ADDITIVE_COUNTERS
    path = traces["unreset"]
    with open_trace(path) as trace:
        whole = count(trace, ["neuron_state"]).totals()["neuron_state"]
    added = add_counter_results(by_step(path, 0, lambda t: count(t, ["neuron_state"]))).totals()["neuron_state"]
    assert added != whole


@pytest.mark.slow  # a local Dask cluster, as tests/conftest.py marks test_dask_engine.py
def test_on_a_cluster_every_step_range_is_a_task(traces):
    distributed = pytest.importorskip("distributed")
    path = traces["training"]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        counts = many.count(path, list(COUNTERS), engine="dask", client=client, shard_events=1)
        with distributed.get_task_stream(client) as stream:
            neuromc = many.energy(path, "neuromc", engine="dask", client=client, shard_events=1)
    assert sum(task["key"].startswith("_shard") for task in stream.data) == 2 * STEPS
    with open_trace(path) as trace:
        pd.testing.assert_frame_equal(sorted_frame(counts.total), sorted_frame(count(trace, list(COUNTERS))),
                                      check_dtype=False)
        pd.testing.assert_frame_equal(neuromc.frame, energy(trace, "neuromc").to_frame(), rtol=1e-9, check_dtype=False)
