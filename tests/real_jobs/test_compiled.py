"""torch.compile under capture: detected (a compiled module, in place or wrapped, or a compiled
function), stated in the manifest, warned about once per trace; the trace holds the eager ops
and the user's outputs are unchanged."""

from __future__ import annotations

import json

import pytest

from tests.real_jobs.tracefiles import column, manifests, reference_problems, run_job

WARNING = "torch.compile was used while capturing"


def test_compiled_programs_are_detected_stated_and_warned_about(tmp_path):
    job = run_job("compiled_model.py", tmp_path, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    if "skip" in result:
        pytest.skip(result["skip"])
    assert result == {"wrapped": True, "in_place": True, "function": True, "plain": True}
    expected = {"wrapped": "compiled module", "in_place": "compiled module", "function": "head (compiled_model.py"}
    for case, seen in expected.items():
        root = tmp_path / case
        manifest = manifests(root)[0]
        assert manifest["status"] == "complete" and manifest["degraded"] == [] and not reference_problems(root)
        assert manifest["compiled"] is True
        assert any(seen in what for what in manifest["compiled_seen"]), manifest["compiled_seen"]
        assert job.stderr.count(f"{root}: {WARNING}") == 1  # once per trace
        assert "aten.addmm.default" in column(root, "events", "op")  # the eager graph
    plain = manifests(tmp_path / "plain")[0]
    assert plain["compiled"] is False and plain["compiled_seen"] == []
    assert f"{tmp_path / 'plain'}: {WARNING}" not in job.stderr
