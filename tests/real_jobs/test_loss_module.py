"""A multi-step SpikingJelly net trained with a loss module: SpikingJelly's own tracker aborts
this run ("active_modules stack underflow"); the capture must not, must leave the training
bit-identical, and must record where SpikingJelly would have stopped."""

from __future__ import annotations

import json

from tests.real_jobs.tracefiles import column, reference_problems, run_job, table


def test_loss_module_run_completes_and_records_spikingjelly_abort(tmp_path):
    job = run_job("snn_loss_module.py", tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["spikingjelly_tracker"] == "active_modules stack underflow"  # the reference quirk is real
    assert result["captured_losses"] == result["twin_losses"]
    assert result["parameters_identical"]

    for name in ("scenario", "manual"):
        root = tmp_path / name
        manifest = json.loads((root / "manifest.json").read_text())
        assert manifest["status"] == "complete" and manifest["degraded"] == []
        assert not reference_problems(root)
        [underflow] = manifest["tracker_underflows"]
        modules = table(root, "modules").to_pylist()
        loss_module = next(m for m in modules if m["module_id"] == underflow["module_id"])
        assert loss_module["class_name"] == "CrossEntropyLoss" and underflow["tracker_name"] == "CrossEntropyLoss"
        assert underflow["count"] == 1
        # It happened inside the backward stage, at the loss's input gradients: the first op
        # of backward already ran (the loss's own backward), the network's had not.
        markers = table(root, "stage_markers").to_pylist()
        begin, end = (next(m["seq"] for m in markers if m["name"] == "backward" and m["kind"] == k) for k in ("begin", "end"))
        assert begin < underflow["first_seq"] < end
        events = table(root, "events").to_pylist()
        after = [e["op"] for e in events if underflow["first_seq"] <= e["seq"] < end]
        assert "aten.convolution_backward.default" in after  # recording went on to the first layer
        assert any(e["phase"] == "optimizer" for e in events)
        # backward_post of the loss module follows at the same place, its forward events too
        kinds = [r["kind"] for r in table(root, "module_events").to_pylist() if r["module_id"] == underflow["module_id"]]
        assert kinds[-1] == "backward_post"
    # the scenario suspends the loss, the manual run records it (unlabeled)
    manual_ops = column(tmp_path / "manual", "events", "op")
    assert "aten._log_softmax.default" in manual_ops
    assert "aten._log_softmax.default" not in column(tmp_path / "scenario", "events", "op")
