"""Data-parallel training on 2 gloo processes started together (DDP, FSDP2): every rank is
captured whole, training stays bit-identical to the uncaptured twin, and each collective is
a `collectives` row the analysis can read: its kind, group size and bytes; the analysis sums
them per rank, stage and kind (the collective_traffic view, `spiketrace collectives`)."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.capture import Recorder
from tests.real_jobs.tracefiles import manifests, reference_problems, run_job, table

EXPECTED_KINDS = {"ddp": {"allreduce", "broadcast"}, "fsdp": {"allgather", "reduce_scatter"}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """kind -> the directory its job wrote (run once per kind for the module's tests)."""
    done = {}

    def train(kind: str):
        if kind not in done:
            out = tmp_path_factory.mktemp(kind)
            job = run_job("distributed_training.py", out, kind, timeout=180)
            assert job.returncode == 0, job.stderr[-3000:]
            done[kind] = out
        return done[kind]

    return train


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_every_rank_is_captured_with_its_collectives(trained, kind):
    tmp_path = trained(kind)
    results = [json.loads((tmp_path / f"result-rank{rank}.json").read_text()) for rank in (0, 1)]
    for result in results:
        assert "error" not in result, result["error"]
        assert result["identical"], result
    root = tmp_path / "trace"
    found = manifests(root)
    assert sorted(found) == [0, 1]
    for rank, manifest in found.items():
        assert (manifest["status"], manifest["world_size"], manifest["degraded"]) == ("complete", 2, [])
        assert not reference_problems(root, rank)
        rows = table(root, "collectives", rank).to_pylist()
        events = {e["seq"]: e for e in table(root, "events", rank).to_pylist()}
        assert {r["kind"] for r in rows} == EXPECTED_KINDS[kind]
        for row in rows:
            assert (row["group_size"], row["group_rank"], row["backend"]) == (2, rank, "gloo")
            assert events[row["seq"]]["op"].startswith("c10d.")
        by_step = {}
        for row in rows:
            by_step.setdefault((events[row["seq"]]["step"], row["kind"]), []).append(row)
        gradients = results[rank]["parameter_bytes"]
        for step in (0, 1):
            if kind == "ddp":  # every gradient is all-reduced (summed) once per step, in backward
                [allreduce] = by_step[(step, "allreduce")]
                assert allreduce["input_bytes"] == allreduce["output_bytes"] == gradients
                assert allreduce["reduce_op"] == "SUM" and events[allreduce["seq"]]["in_backward"]
            else:  # each rank holds half: parameters gathered whole, gradients scattered back in halves
                gathers, scatters = by_step[(step, "allgather")], by_step[(step, "reduce_scatter")]
                assert all(g["output_bytes"] == 2 * g["input_bytes"] for g in gathers)
                assert all(s["input_bytes"] == 2 * s["output_bytes"] for s in scatters)
                # every gradient, padded so dim 0 splits evenly (the linear's 5 rows to 6)
                assert sum(s["input_bytes"] for s in scatters) == gradients + (6 - 5) * (144 + 1) * 4
                assert {s["reduce_op"] for s in scatters} == {"AVG"}
        # the tensors a collective writes are new states whose values are not scanned (an
        # asynchronous collective is still writing them); those it only reads keep theirs
        tensors = {t["tensor_id"]: t for t in table(root, "tensors", rank).to_pylist()}
        seqs = {r["seq"] for r in rows}
        written = [u for u in table(root, "event_tensors", rank).to_pylist()
                   if u["seq"] in seqs and tensors[u["tensor_id"]]["first_seq"] == u["seq"]]
        assert written and all(tensors[u["tensor_id"]]["nnz"] is None for u in written)


# The job's net, by hand: Conv2d(2, 4, 3) has 72 + 4 parameters, BatchNorm2d(4) 4 + 4, Linear(144, 5)
# 720 + 5: 809 fp32 parameters, 3236 bytes. Its buffers: BN's running_mean and running_var (8
# fp32, 32 bytes) and num_batches_tracked (one int64, 8 bytes). 2 steps, 2 ranks.


def traffic(root) -> dict:
    with open_trace(root) as trace:
        rows = trace.sql("SELECT * FROM collective_traffic").to_dict("records")
    return {(r["rank"], r["stage"], r["kind"]): (r["calls"], r["steps"], r["input_bytes"], r["output_bytes"],
                                                 r["bus_bytes"], r["group_size"], r["phase"]) for r in rows}


def test_ddp_traffic_per_rank_stage_and_kind(trained):
    root = trained("ddp") / "trace"
    expected = {}
    for rank in (0, 1):
        # backward: one allreduce (sum) of all 3236 gradient bytes per step: one bucket, as DDP's
        # first bucket holds up to 1 MiB. A ring allreduce moves 2(n-1)/n of it per rank: n = 2.
        expected[rank, "backward", "allreduce"] = (2, 2, 2 * 3236, 2 * 3236, 2 * 3236, 2, "backward")
        # forward: DDP broadcasts the buffers from rank 0 before each forward, coalesced per dtype
        # (32 + 8 bytes, 2 calls); before the second forward it also rebuilds its buckets and
        # broadcasts their layout: the 6 parameters' indices and the bucket count (7 int32, 28
        # bytes) and the one bucket's size (1 int32, 4 bytes).
        expected[rank, "forward", "broadcast"] = (6, 2, 2 * 40 + 28 + 4, 2 * 40 + 28 + 4, 2 * 40 + 28 + 4, 2, "forward")
    assert traffic(root) == expected

    runner = CliRunner()
    shown = runner.invoke(main, ["collectives", str(root), "--format", "json"])
    assert shown.exit_code == 0 and len(json.loads(shown.stdout)) == 4
    info = json.loads(runner.invoke(main, ["info", str(root), "--format", "json"]).stdout)["collectives"]
    assert info == [{"kind": "allreduce", "calls": 4, "input_bytes": 4 * 3236, "output_bytes": 4 * 3236,
                     "bus_bytes": 4 * 3236},
                    {"kind": "broadcast", "calls": 12, "input_bytes": 2 * 112, "output_bytes": 2 * 112,
                     "bus_bytes": 2 * 112}]
    table_text = runner.invoke(main, ["info", str(root)]).stdout
    assert "collectives (all ranks" in table_text and "allreduce" in table_text


def test_fsdp_traffic_per_rank_stage_and_kind(trained):
    # Each rank holds half of every parameter, split on dim 0 (padded to split evenly): the conv
    # block's 36 + 2 weight and bias rows and BN's 2 + 2 (42 fp32, 168 bytes), the Linear's
    # 3 of its 6 padded rows of 144 and 3 of 6 biases (435 fp32, 1740 bytes): 1908 bytes a rank.
    # Both blocks gather their parameters whole (2 x 1908 bytes) before their forward and again
    # before their backward (resharded after forward), and scatter the gradients back in halves.
    expected = {}
    for rank in (0, 1):
        for stage in ("forward", "backward"):  # 2 blocks x 2 steps; a ring gathers (n-1)/n of the whole
            expected[rank, stage, "allgather"] = (4, 2, 2 * 1908, 2 * 2 * 1908, 2 * 1908, 2, stage)
        expected[rank, "backward", "reduce_scatter"] = (4, 2, 2 * 2 * 1908, 2 * 1908, 2 * 1908, 2, "backward")
    assert traffic(trained("fsdp") / "trace") == expected


def test_one_process_has_no_collectives(tmp_path):
    model = torch.nn.Linear(3, 2)
    with Recorder(tmp_path / "trace", model=model) as recorder, recorder.stage("forward"):
        model(torch.ones(1, 3))
    assert traffic(tmp_path / "trace") == {}
    shown = CliRunner().invoke(main, ["collectives", str(tmp_path / "trace")])
    assert shown.exit_code == 0 and shown.stdout.startswith("(no collectives")
    assert "collectives" not in CliRunner().invoke(main, ["info", str(tmp_path / "trace")]).stdout.split("counts:")[1]
