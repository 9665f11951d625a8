"""Statistics must leave user storages resizable: out= ops that resize their output and
`untyped_storage().resize_(0)` (activation freeing, FSDP2's free_storage) after captured ops."""

from __future__ import annotations

import json

from tests.real_jobs.tracefiles import reference_problems, run_job, table


def test_out_variants_and_storage_resizes_after_captured_ops(tmp_path):
    job = run_job("storage_resize.py", tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["activation_storage"] == 0 and result["freed_weight_storage"] == 0
    assert result["weight_restored"] and result["outputs_equal"]
    root = tmp_path / "trace"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    assert not reference_problems(root)

    # The statistics of the out= results are those counted in the script.
    events = {e["seq"]: e["op"] for e in table(root, "events").to_pylist()}
    nnz = {t["tensor_id"]: t["nnz"] for t in table(root, "tensors").to_pylist()}
    outs = {}
    for use in table(root, "event_tensors").to_pylist():
        if use["role"] == "out":
            outs[events[use["seq"]]] = nnz[use["tensor_id"]]
    assert outs["aten.cat.out"] == result["cat_nnz"]
    assert outs["aten.sum.IntList_out"] == result["sum_nnz"]
    assert "aten.resize_.default" in events.values()
