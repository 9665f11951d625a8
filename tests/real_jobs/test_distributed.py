"""Data-parallel training on 2 gloo processes started together (DDP, FSDP2): every rank is
captured whole, training stays bit-identical to the uncaptured twin, and each collective is
a `collectives` row the analysis can read: its kind, group size and bytes."""

from __future__ import annotations

import json

import pytest

from tests.real_jobs.tracefiles import manifests, reference_problems, run_job, table

EXPECTED_KINDS = {"ddp": {"allreduce", "broadcast"}, "fsdp": {"allgather", "reduce_scatter"}}


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_every_rank_is_captured_with_its_collectives(tmp_path, kind):
    job = run_job("distributed_training.py", tmp_path, kind, timeout=180)
    assert job.returncode == 0, job.stderr[-3000:]
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
