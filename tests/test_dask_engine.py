"""The dask engine equals the in-process one: the same counts and energies, from one task per
(trace, rank) shard added up on a LocalCluster of two worker processes.

Traces: two ranks of three training steps, and three ranks of two (tests/training_runs.py), so
each trace is cut into shards and a combination holds traces of different shapes. Integers
must be equal, energies equal to 1e-9 relative. The models RANK_ADDITIVE_MODELS names (compute,
neuromc) are evaluated per rank; lemaire and spikesim per whole trace, and the last test shows
why: lemaire's qualia convention does not add up over ranks.
"""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from spiketrace.analyze import many, open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import ALL_COUNTERS, COUNTERS, count
from spiketrace.analyze.energy import energy
from spiketrace.analyze.many import RANK_ADDITIVE_MODELS
from tests.training_runs import record_ranks

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # model scope: training traces, on purpose


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask_engine")
    return [str(record_ranks(root / "two_ranks", 3, ranks=2)), str(record_ranks(root / "three_ranks", 2, ranks=3))]


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client


def assert_counts_equal(a, b):
    pd.testing.assert_frame_equal(a.frame, b.frame)
    for name in ("unsupported", "not_applicable", "details"):
        pd.testing.assert_frame_equal(getattr(a, name).reset_index(drop=True), getattr(b, name).reset_index(drop=True),
                                      check_dtype=False)
    assert (a.selected_events, a.selected_bytes) == (b.selected_events, b.selected_bytes)


def sorted_counts(result):
    """The result with its frame in one order (a single trace appends its module-level counters last)."""
    result.frame = result.frame.sort_values(["counter", "scope", "op"], ignore_index=True)
    result.details = result.details.sort_values(["counter", "family", "scope", "metric"], ignore_index=True)
    return result


def report_rows(frame):
    """A report's rows in one order (a model may list a breakdown's keys in its query's order)."""
    return frame.sort_values(["breakdown", "key"], kind="stable", ignore_index=True)


def test_counts_equal_the_in_process_engine(traces, client):
    names = list(ALL_COUNTERS)
    shards = many.count(traces, names, engine="dask", client=client)
    whole = many.count(traces, names)
    assert_counts_equal(shards.total, whole.total)
    for trace in traces:
        with open_trace(trace) as opened:  # and each trace equals a single trace's count()
            assert_counts_equal(sorted_counts(shards.by_trace[trace]), sorted_counts(count(opened, names)))
    assert [f.ranks for f in shards.traces] == [[0, 1], [0, 1, 2]]
    totals = shards.totals_by_trace().groupby("counter")["value"].sum().to_dict()
    assert totals == shards.total.totals()  # the traces add up to the total


def test_counts_by_stage_with_a_rank_and_step_selected(traces, client):
    options = {"by": ("stage", "step"), "rank": 1, "step": 1}
    shards = many.count(traces, list(COUNTERS), engine="dask", client=client, **options)
    assert_counts_equal(shards.total, many.count(traces, list(COUNTERS), **options).total)
    assert set(shards.total.frame["step"]) == {1} and len(shards.total.frame)


@pytest.mark.parametrize("model, options", [
    ("compute", {}),
    ("neuromc", {}),
    ("neuromc", {"stage": "backward", "compat": "spikingjelly"}),
    ("lemaire", {"preset": "lemaire-qualia"}),
    ("spikesim", {}),
])
def test_energy_equals_the_in_process_engine(traces, client, model, options):
    shards = many.energy(traces, model, engine="dask", client=client, **options)
    whole = many.energy(traces, model, **options)
    pd.testing.assert_frame_equal(report_rows(shards.frame), report_rows(whole.frame), rtol=1e-9)
    for trace in traces:
        with open_trace(trace) as opened:
            single = energy(opened, model, **options).to_frame()
        pd.testing.assert_frame_equal(report_rows(shards.by_trace[trace]), report_rows(single), rtol=1e-9)
    assert shards.energy_total_pj == pytest.approx(sum(shards.totals_by_trace()["energy_total_pj"]), rel=1e-9)
    assert shards.model == model


def test_the_cli_on_a_scheduler_prints_what_the_in_process_engine_prints(traces, client):
    address = client.scheduler.address
    for command in (["counts", *traces, "--by", "trace"], ["energy", *traces, "--model", "compute", "--by", "stage"]):
        here = CliRunner().invoke(main, command)
        there = CliRunner().invoke(main, [*command, "--scheduler", address])
        assert here.exit_code == there.exit_code == 0, there.output
        assert there.stdout == here.stdout


def test_a_trace_that_fails_on_a_worker_is_one_line_here(traces, client, tmp_path):
    missing = CliRunner().invoke(main, ["counts", traces[0], str(tmp_path / "missing"), "--scheduler",
                                        client.scheduler.address])
    assert missing.exit_code == 2 and missing.output.strip() == f"error: {tmp_path / 'missing'}: no such trace directory"


def test_lemaire_qualia_does_not_add_up_over_ranks(traces):
    """Why lemaire is not in RANK_ADDITIVE_MODELS: its qualia convention prices the spike rates
    pooled over every call of every rank, so the ranks' energies do not add up to the trace's."""
    assert "lemaire" not in RANK_ADDITIVE_MODELS
    with open_trace(traces[0]) as whole:
        total = energy(whole, "lemaire", "lemaire-qualia").total_pj
    by_rank = 0.0
    for rank in (0, 1):
        with open_trace(traces[0], ranks=[rank]) as shard:
            by_rank += energy(shard, "lemaire", "lemaire-qualia").total_pj
    assert abs(by_rank - total) > 1e-6 * total
