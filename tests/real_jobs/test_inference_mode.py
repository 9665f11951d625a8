"""torch.inference_mode() skips autograd and with it the decompositions autograd runs; the
capture records the same decomposed ops as under no_grad (same sequence, arguments, tensor
shapes and statistics), and the user's outputs stay bit-identical."""

from __future__ import annotations

import json

from tests.real_jobs.tracefiles import manifests, reference_problems, run_job, table


def recorded_ops(root) -> list[tuple]:
    """Per op in order: name, non-tensor arguments, and each tensor's role, shape, nnz, 0/1-ness."""
    tensors = {t["tensor_id"]: (tuple(t["shape"]), t["nnz"], t["is01"]) for t in table(root, "tensors").to_pylist()}
    uses: dict[int, list] = {}
    for use in table(root, "event_tensors").to_pylist():
        uses.setdefault(use["seq"], []).append((use["role"], use["position"], use["item"], tensors[use["tensor_id"]]))
    stats: dict[int, list] = {}
    for row in table(root, "op_stats").to_pylist():
        stats.setdefault(row["seq"], []).append((row["stat"], row["value"]))
    return [
        (e["op"], e["args"], e["kwargs"], e["scope_id"], tuple(uses.get(e["seq"], ())), tuple(sorted(stats.get(e["seq"], ()))))
        for e in sorted(table(root, "events").to_pylist(), key=lambda e: e["seq"])
    ]


def test_inference_mode_records_what_no_grad_records(tmp_path):
    job = run_job("inference_modes.py", tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["identical"] == {"no_grad": True, "inference_mode": True}
    assert result["inference_tensor"] == {"no_grad": False, "inference_mode": True}  # the result's kind is kept
    assert result["spikes"] > 0

    for name in ("no_grad", "inference_mode"):
        manifest = manifests(tmp_path / name)[0]
        assert manifest["status"] == "complete" and manifest["degraded"] == [], manifest["degraded"]
        assert not reference_problems(tmp_path / name)
    no_grad, inference = recorded_ops(tmp_path / "no_grad"), recorded_ops(tmp_path / "inference_mode")
    names = {op[0] for op in inference}
    assert {"aten.convolution.default", "aten.native_batch_norm.default", "aten.addmm.default"} <= names
    assert not names & {"aten.conv2d.default", "aten.linear.default", "aten.batch_norm.default", "sj_lif.forward.default"}
    assert inference == no_grad
    assert any(stats for *_, stats in inference)  # synaptic statistics were taken (binary inputs)
