"""Capture never reads memory a tensor's storage no longer holds (freed or shrunk storages)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tests.guest.harness import compare

PATHS = {"compiled": {}, "python": {"SPIKETRACE_SLOW_PATHS": "all"},
         # the device path: the CPU's kernel, and the torch kernels a CUDA tensor takes
         "device": {"SPIKETRACE_GUEST_DEFER": "1"},
         "device-torch": {"SPIKETRACE_GUEST_DEFER": "1", "SPIKETRACE_SLOW_PATHS": "native_statistics"}}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_freed_and_shrunk_storages_are_described_not_read(tmp_path, path):
    manifest, _ = compare("storage_freed", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == []
    tensors = pq.read_table(tmp_path / "trace" / "tensors").to_pylist()
    by_shape = {}
    for row in tensors:
        by_shape.setdefault(tuple(row["shape"]), []).append(row["nnz"])
    # Every view of the freed 64x64 and of the shrunk 1024x1024 storage: no statistics (null).
    for shape in [(64, 64), (4096,), (1024, 1024), (1048576,)]:
        assert by_shape[shape] and set(by_shape[shape]) == {None}, (shape, by_shape[shape])
    # shrunk.view(-1)[:10] and its double: the 10 values the storage still holds, randn's (nonzero)
    assert set(by_shape[(10,)]) == {10}
