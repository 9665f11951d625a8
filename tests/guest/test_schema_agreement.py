"""What capture writes for sparse tensors, inference tensors and non-finite scalar arguments
is what the schema documents and validation accepts, run as a user's script, on
the compiled record path and on the Python one."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from spiketrace.schemas.plausibility import NO_STORAGE, NO_VERSION_COUNTER
from tests.guest.harness import compare

PATHS = {"compiled": {}, "python": {"SPIKETRACE_SLOW_PATHS": "all"}}


def _rows(tmp_path, table: str) -> list[dict]:
    return pq.read_table(tmp_path / "trace" / table).to_pylist()


@pytest.mark.parametrize("path", sorted(PATHS))
def test_sparse_tensors_have_no_strides_and_no_storage(tmp_path, path):
    manifest, _ = compare("schema_sparse", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    tensors = _rows(tmp_path, "tensors")
    sparse = [t for t in tensors if t["stride"] == []]
    # the COO and CSR copies of `dense` and the coalesced sum: no strides, no storage
    assert len(sparse) >= 3 and all(t["shape"] == [5, 4] for t in sparse)
    assert {(t["storage_ptr"], t["storage_offset"]) for t in sparse} == {(NO_STORAGE, 0)}
    assert all(len(t["stride"]) == len(t["shape"]) for t in tensors if t["storage_ptr"] != NO_STORAGE)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_inference_tensors_have_version_minus_one(tmp_path, path):
    manifest, _ = compare("schema_inference", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    versions = {t["tensor_id"]: t["version"] for t in _rows(tmp_path, "tensors")}
    events = {e["seq"]: e["op"] for e in _rows(tmp_path, "events")}
    outputs = {}
    for use in _rows(tmp_path, "event_tensors"):
        if use["role"] == "out":
            outputs.setdefault(events[use["seq"]], []).append(versions[use["tensor_id"]])
    # inside inference_mode: the layers' outputs and the in-place mul; outside: softmax, argmax
    assert set(outputs["aten.addmm.default"]) == set(outputs["aten.mul_.Tensor"]) == {NO_VERSION_COUNTER}
    assert outputs["aten._softmax.default"] == outputs["aten.argmax.default"] == [0]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_non_finite_scalars_are_tagged_floats(tmp_path, path):
    manifest, _ = compare("schema_nonfinite_scalars", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    tags = set()
    for event in _rows(tmp_path, "events"):
        for column in ("args", "kwargs"):
            text = event[column]
            tags |= {tag for tag in ("nan", "inf", "-inf") if f'{{"$float":"{tag}"}}' in text}
            json.loads(text)  # strict JSON: no bare NaN or Infinity
    assert tags == {"nan", "inf", "-inf"}
