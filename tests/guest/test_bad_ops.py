"""One bad op costs at most that op's rows, never the trace: a user's scripts with tensors the
capture once failed on (negative views, nested and quantized tensors, torch.func transforms,
a user's warnings.simplefilter("error")) run as they run plain, and leave a complete trace.

Each program runs with the compiled record and with the Python one (SPIKETRACE_SLOW_PATHS=all),
which take these tensors' statistics by different scans."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tests.guest.harness import compare

PATHS = {"compiled": {}, "python": {"SPIKETRACE_SLOW_PATHS": "all"}}


def _tensors(tmp_path) -> list[dict]:
    return pq.read_table(tmp_path / "trace" / "tensors").to_pylist()


@pytest.mark.parametrize("path", sorted(PATHS))
def test_negative_views_are_recorded_with_their_statistics(tmp_path, path):
    manifest, _ = compare("bad_neg_view", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    assert manifest["counts"]["events"] > 0
    # every tensor is a plain CPU one: its statistics are taken, a negative view's of its values
    assert all(row["nnz"] is not None for row in _tensors(tmp_path))


@pytest.mark.parametrize("path", sorted(PATHS))
def test_quantized_tensors_are_recorded_with_the_statistics_of_their_values(tmp_path, path):
    manifest, _ = compare("bad_quantized", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    quantized = [row for row in _tensors(tmp_path) if row["dtype"] in ("quint8", "qint8")]
    assert quantized and all(row["nnz"] is not None for row in quantized)
    # quantize_per_tensor(spikes, 1.0, 0, quint8): the 0/1 tensor reads as 0/1
    assert any(row["is01"] for row in quantized if row["dtype"] == "quint8")


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_users_warnings_as_errors_do_not_degrade_the_trace(tmp_path, path):
    manifest, _ = compare("bad_warnings_error", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    assert manifest["counts"]["events"] > 0 and manifest["counts"]["op_stats"] > 0


@pytest.mark.parametrize("path", sorted(PATHS))
def test_torch_func_transforms_are_recorded(tmp_path, path):
    manifest, _ = compare("bad_func_transforms", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    assert manifest["counts"]["events"] > 0


@pytest.mark.parametrize("path", sorted(PATHS))
def test_ops_on_nested_tensors_are_recorded_with_the_rest(tmp_path, path):
    # A nested tensor has no single shape: its row holds null at the ragged dimension and its
    # components' shapes (schema 1.4); the ops on it and beside it are recorded.
    manifest, _ = compare("bad_nested", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    ops = {row["op"] for row in pq.read_table(tmp_path / "trace" / "events").to_pylist()}
    assert {"aten.cat.default", "aten.add.Tensor", "aten.mul.Tensor", "aten.relu.default"} <= ops
    nested = [row for row in _tensors(tmp_path) if row["nested_shapes"] is not None]
    assert nested and {tuple(row["shape"]) for row in nested if not row["is_meta"]} == {(2, None, 3)}
    assert all(row["numel"] == 18 for row in nested if not row["is_meta"])
