"""Warnings read the same whether a trace is evaluated whole (the in-process engine) or rank by
rank and added up (the dask engine's per-rank split, analyze/many/combine.py).

The shards are evaluated here exactly as the dask engine's tasks evaluate them (many.shards'
plan and evaluate_shard, then the work's add), without a cluster. The ranks of the trace leave
different work uncosted, so a warning that counted it per shard would read differently added
up (NeuroMC's used to say "2 kinds of work are uncosted" and "4 kinds ..." where the whole trace
says 4); the NeuroBench convention's samples note is said once, its samples added.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count
from spiketrace.analyze.energy import energy
from spiketrace.analyze.many.shards import CountWork, EnergyWork, evaluate_shard, plan
from spiketrace.capture import Recorder
from tests.test_neurobench_samples import Unrun


def record(path, net_of_rank, forward):
    for rank in (0, 1):
        net = net_of_rank()
        with Recorder(path, model=net, rank=rank, world_size=2) as recorder:
            with recorder.stage("forward", phase="forward"), torch.no_grad():
                forward(net, rank)
            recorder.step()
    return path


def by_shards(work, path):
    """The result of the trace's per-rank shards, each evaluated apart, added up."""
    facts, shards = plan(work, str(path))
    assert len(shards) == 2  # one per rank
    return work.add([evaluate_shard(work, str(path), shard) for shard in shards])


def uncosted_work(net, rank):
    """Rank 0 leaves one kind of op uncosted by NeuroMC, rank 1 three."""
    y = net(torch.ones(2, 4)).exp()
    if rank == 1:
        y.cumsum(0)
        y.sort()


def linear():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3))


def test_neuromc_and_compute_warnings_add_up_over_ranks(tmp_path):
    path = record(tmp_path / "t", linear, uncosted_work)
    for model in ("neuromc", "compute"):
        with open_trace(path) as trace, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            whole = energy(trace, model)
        work = EnergyWork(model, None, (), {}, {"run": None, "verify": None})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            added = by_shards(work, path)
        assert added.warnings == list(whole.warnings), model
        assert model != "neuromc" or any("uncosted" in w for w in whole.warnings)


def test_the_neuromc_uncosted_warning_carries_no_count(tmp_path):
    path = record(tmp_path / "t", linear, uncosted_work)
    with open_trace(path) as trace, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = energy(trace, "neuromc")
    assert len(report.uncosted) >= 2  # the count is in report.uncosted (and the report's table), not the words
    assert [w for w in report.warnings if "uncosted" in w] == [
        "some work is uncosted (report.uncosted lists each kind, its calls and why); the totals cover the rest"]


def test_the_samples_note_and_samples_add_up_over_ranks(tmp_path):
    x = (torch.rand(5, 2, 4, generator=torch.Generator().manual_seed(0)) < 0.5).float()
    path = record(tmp_path / "t", Unrun, lambda net, rank: net(x[: 5 - rank]))  # 5 and 4 samples by dim 0
    with open_trace(path) as trace, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = count(trace, convention="neurobench")
    work = CountWork(None, {"convention": "neurobench"}, {"run": None, "verify": None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        added = by_shards(work, path)
    assert whole.frame.attrs["samples"] == added.frame.attrs["samples"] == 9
    assert added.frame.attrs["samples_notes"] == whole.frame.attrs["samples_notes"]
    assert len(whole.frame.attrs["samples_notes"]) == 1
