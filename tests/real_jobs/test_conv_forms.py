"""Spike inputs into convolutions whose aten calls carry every argument form (padding="valid"
gives padding=[0], stride=[2], padding=[1], conv1d/3d, transposed): the capture neither
breaks the forward nor misses a spike-tap count."""

from __future__ import annotations

import json

from tests.real_jobs.tracefiles import reference_problems, run_job, table

CONV = "aten.convolution.default"


def test_every_conv_argument_form_gets_its_spike_taps(tmp_path):
    job = run_job("conv_argument_forms.py", tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["captured_loss"] == result["twin_loss"]
    root = tmp_path / "trace"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    assert not reference_problems(root)

    convs = [e["seq"] for e in table(root, "events").to_pylist() if e["op"] == CONV and e["phase"] == "forward"]
    stats = {(r["seq"], r["stat"]): r["value"] for r in table(root, "op_stats").to_pylist()}
    expected = result["expected"]
    assert len(convs) == len(expected) == 8
    assert [stats.get((seq, "conv_spike_taps")) for seq in convs] == [row["taps"] for row in expected]
    both = [(i, stats.get((seq, "conv_both_binary_sum"))) for i, seq in enumerate(convs)]
    assert [(i, v) for i, v in both if v is not None] == [
        (i, row["both_binary_sum"]) for i, row in enumerate(expected) if "both_binary_sum" in row
    ]
