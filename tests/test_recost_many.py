"""Recost over several traces and on a cluster: spiketrace.analyze.many.recost and `spiketrace recost
TRACE... [--engine dask]` map each trace (or each shard of one: its ranks, its step ranges)
once, cost it under every preset of the sweep, and add the rows (one per preset and breakdown
entry) per preset. Each trace's rows equal the single-trace spiketrace.analyze.energy.recost, and so do a
trace's shards added up; over several traces the rows add up, hardware sizes combining as
spiketrace.analyze.many.SIZE_ROWS says (Lemaire's buffer capacities by maximum).

Traces: two ranks of three training steps and three ranks of two (tests/training_runs.py).
Energies must be equal to 1e-9 relative, the rows in the single-trace order.
"""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from spiketrace.analyze import many, open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import recost
from tests.training_runs import record_ranks

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # model scope: training traces, on purpose

CASES = {  # case -> (model, presets, sweep)
    "compute sweep (bulk)": ("compute", [], {"e_mac_pj": [0.5, 1.0, 4.6], "e_ac_pj": [0.1, 0.9]}),
    "compute presets": ("compute", ["compute-fp32-45nm", "compute-int8-45nm"], None),
    "neuromc sweep and a preset": ("neuromc", ["neuromc-like-v1"],
                                   {"mac_cost_pj.wg": [0.5, 0.7],
                                    "memory_instances.sram_fp_conv_in_w.size_bits": [16.0, 5e6]}),  # fits or not
    "neuromc presets": ("neuromc", ["neuromc-like-v1"], None),
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("recost_many")
    return [str(record_ranks(root / "two_ranks", 3, ranks=2)), str(record_ranks(root / "three_ranks", 2, ranks=3))]


def single(path, model, presets, sweep):
    with open_trace(path) as trace:
        return recost(trace, model, presets, sweep=sweep)


def total(frame: pd.DataFrame) -> pd.Series:
    rows = frame[(frame["breakdown"] == "total") & frame["key"].isin(["energy_total_pj", "total_pj"])]
    return rows.set_index("preset")["pj"]


@pytest.mark.parametrize("case", ["neuromc sweep and a preset", "neuromc presets"])
def test_one_trace_in_step_ranges_equals_its_recost(traces, case):
    """In process, a trace of more than shard_events events is mapped step range by step range."""
    model, presets, sweep = CASES[case]
    sharded = many.recost(traces[0], model, presets, sweep=sweep, shard_events=1)
    pd.testing.assert_frame_equal(sharded.frame, single(traces[0], model, presets, sweep), rtol=1e-9,
                                  check_dtype=False)
    assert sharded.model == model and [f.label for f in sharded.traces] == traces[:1]


def test_several_traces_add_up_per_preset(traces):
    model, presets, sweep = CASES["compute sweep (bulk)"]
    combined = many.recost(traces, model, presets, sweep=sweep)
    singles = [single(path, model, presets, sweep) for path in traces]
    for path, frame in zip(traces, singles):
        pd.testing.assert_frame_equal(combined.by_trace[path], frame, rtol=1e-9, check_dtype=False)
    pd.testing.assert_series_equal(total(combined.frame), total(singles[0]) + total(singles[1]), rtol=1e-9)
    assert list(combined.frame["preset"]) == list(singles[0]["preset"])  # the single trace's order
    by_trace = combined.totals_by_trace()
    assert len(by_trace) == 2 * 6 and by_trace.groupby("preset")["pj"].sum().sort_index().equals(
        total(combined.frame).sort_index())


def test_lemaire_buffers_combine_by_maximum(traces):
    combined = many.recost(traces, "lemaire", ["lemaire-spikingjelly"]).frame
    singles = [single(path, "lemaire", ["lemaire-spikingjelly"], None) for path in traces]
    buffers = [f[f["breakdown"] == "buffer"].set_index("key")["count"] for f in (combined, *singles)]
    assert len(buffers[0]) == 3  # bytes of each buffer: the largest either trace needs
    pd.testing.assert_series_equal(buffers[0], pd.concat(buffers[1:], axis=1).max(axis=1), check_names=False)
    assert total(combined).iloc[0] == pytest.approx(sum(total(f).iloc[0] for f in singles), rel=1e-9)


@pytest.mark.slow  # a local Dask cluster, as tests/conftest.py marks test_dask_engine.py
def test_the_dask_engine_equals_the_in_process_one(traces, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        # one task per (trace, rank), and for neuromc (shard_events=1) per (trace, rank, step);
        # in process each trace is mapped whole
        for case, shard_events in (("compute sweep (bulk)", None), ("neuromc sweep and a preset", 1)):
            model, presets, sweep = CASES[case]
            sharding = {"shard_events": shard_events} if shard_events else {}
            there = many.recost(traces, model, presets, sweep=sweep, engine="dask", client=client, **sharding)
            here = many.recost(traces, model, presets, sweep=sweep)
            pd.testing.assert_frame_equal(there.frame, here.frame, rtol=1e-9, check_dtype=False, obj=case)
            for path in traces:
                pd.testing.assert_frame_equal(there.by_trace[path], here.by_trace[path], rtol=1e-9,
                                              check_dtype=False, obj=f"{case}: {path}")
        command = ["recost", *traces, "--model", "compute", "--sweep", "e_mac_pj=0.5:4.6:3"]
        here = CliRunner().invoke(main, [*command, "--out", str(tmp_path / "here.csv")])
        there = CliRunner().invoke(main, [*command, "--out", str(tmp_path / "there.csv"), "--scheduler",
                                          client.scheduler.address])
        assert here.exit_code == there.exit_code == 0, there.output
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "there.csv"), pd.read_csv(tmp_path / "here.csv"),
                                      rtol=1e-9)


def test_the_cli_writes_the_added_rows(traces, tmp_path):
    out = tmp_path / "sweep.csv"
    result = CliRunner().invoke(main, ["recost", *traces, "--model", "compute", "--sweep", "e_mac_pj=0.5:4.6:3",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote 9 rows for 3 preset(s) to {out}"
    frame = pd.read_csv(out)
    expected = many.recost(traces, "compute", sweep={"e_mac_pj": [0.5, 2.55, 4.6]}).frame
    pd.testing.assert_frame_equal(frame, expected, rtol=1e-9, check_dtype=False)
    one = CliRunner().invoke(main, ["recost", traces[0], "--model", "compute", "--sweep", "e_mac_pj=0.5:4.6:3",
                                    "--rank", "1", "--out", str(tmp_path / "one.csv")])
    assert one.exit_code == 0, one.output
    with open_trace(traces[0]) as trace:
        alone = recost(trace, "compute", sweep={"e_mac_pj": [0.5, 2.55, 4.6]}, rank=1)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "one.csv"), alone, rtol=1e-9, check_dtype=False)
