"""The capture's own functions raise, at every place torch calls into it: the user's loss and
parameters must come out bit-identical to an uncaptured run, each kind of failure must be
logged once and counted in the manifest's `degraded` list, and the rest must be recorded."""

from __future__ import annotations

import json

from tests.real_jobs.tracefiles import column, reference_problems, run_job, table


def test_injected_capture_failures_never_reach_the_training(tmp_path):
    job = run_job("injected_failures.py", tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["losses"] == result["twin_losses"]
    assert result["parameters_identical"]

    root = tmp_path / "trace"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    degraded = manifest["degraded"]
    by_site = {}
    for entry in degraded:
        assert set(entry) == {"site", "what", "error", "count", "first_seq"}
        assert entry["error"].startswith("Injected: injected failure") and entry["count"] >= 1
        assert isinstance(entry["first_seq"], int)
        by_site.setdefault(entry["site"], {})[entry["what"]] = entry
    assert set(by_site) == {"statistics", "dispatch", "module_hook", "grad_hook", "optimizer_hook", "stage"}
    # Counts per kind, from the job's structure: 2 steps; the Dropout's forward pre and post
    # hooks, and its backward pre and post, once per step; 2 convolutions per forward.
    assert by_site["module_hook"]["Sequential.2"]["count"] == 4
    assert by_site["grad_hook"]["Sequential.2"]["count"] == 4
    assert by_site["optimizer_hook"]["SGD"]["count"] == 2
    assert by_site["stage"]["optimizer"]["count"] == 2
    assert by_site["statistics"]["conv_spike_taps of aten.convolution.default"]["count"] == 4
    # nn.Sigmoid once per forward; the surrogate gradient of each of the 2 spike layers per backward
    assert by_site["dispatch"]["aten.sigmoid.default"]["count"] == 2 + 2 * 2
    # One warning per kind, naming the trace.
    warnings = [line for line in job.stderr.splitlines() if line.startswith("spiketrace: capture into")]
    assert len(warnings) == len(degraded) and all(str(root) in line for line in warnings)

    # What could be recorded was, and hangs together.
    assert not reference_problems(root)
    ops = column(root, "events", "op")
    assert "aten.sigmoid.default" not in ops and ops.count("aten.convolution.default") == 4
    assert column(root, "optimizer_steps", "seq") == []
    tensors = table(root, "tensors").to_pylist()
    assert any(t["numel"] > 1000 and t["nnz"] is None for t in tensors)  # the injected statistic: null
    assert all(t["nnz"] is not None for t in tensors if t["numel"] <= 1000 and not t["is_meta"])
    kinds = {(r["name"], r["kind"]) for r in table(root, "stage_markers").to_pylist()}
    assert ("optimizer", "begin") in kinds and ("optimizer", "end") not in kinds
