"""Capture raises nothing into the user's code: gradients w.r.t. inputs, deep models."""

from __future__ import annotations

import pyarrow.parquet as pq

from tests.guest.harness import compare


def test_autograd_grad_with_respect_to_inputs(tmp_path):
    manifest, _ = compare("grad_wrt_input", tmp_path)
    assert manifest["degraded"] == []
    kinds = pq.read_table(tmp_path / "trace" / "module_events").column("kind").to_pylist()
    # The backward of the two grad calls, the double backward and loss.backward() each reach
    # the Linear layers: every module with a forward call has backward events.
    assert kinds.count("backward_pre") >= 2 and kinds.count("backward_post") >= 2


def test_model_nested_as_deep_as_the_plain_run_allows(tmp_path):
    manifest, _ = compare("deep_nesting", tmp_path)
    assert manifest["degraded"] == []
    modules = pq.read_table(tmp_path / "trace" / "modules").num_rows
    assert modules == 232  # 231 Nest modules (depths 230..0) and the Linear
