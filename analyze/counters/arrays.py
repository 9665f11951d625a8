"""Array lookups the fact gatherer (gather.py) is built from: the row of a key (`Index`), a
set of tensor states as numpy columns (`TensorStates`), Arrow takes that stay within
chunks, and distinct keys by table. Pure numpy/pyarrow; nothing here reads the trace."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def numpy_column(column) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, validity or None when no nulls) of an Arrow column; nulls hold 0/False."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    valid = None
    if array.null_count:
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        array = pc.fill_null(array, False if pa.types.is_boolean(array.type) else 0)
    return np.asarray(array.to_numpy(zero_copy_only=False)), valid


class Index:
    """Row of each key in `keys` (the first, if repeated), -1 where absent: a dense table
    when the keys are about contiguous (seq, tensor ids of one chunk), else a sorted one."""

    def __init__(self, keys: np.ndarray) -> None:
        self.size = len(keys)
        self.low = int(keys.min()) if self.size else 0
        span = int(keys.max()) - self.low + 1 if self.size else 0
        self.dense = span <= 4 * self.size + 4096
        if self.dense:
            self.table = np.full(span, -1, dtype=np.int32)
            self.table[keys[::-1] - self.low] = np.arange(self.size - 1, -1, -1, dtype=np.int32)
        else:
            self.order = np.argsort(keys, kind="stable").astype(np.int32)
            self.sorted = keys[self.order]

    def find(self, keys: np.ndarray) -> np.ndarray:
        if not self.size:
            return np.full(len(keys), -1, dtype=np.int32)
        if self.dense:
            offset = keys - self.low
            if len(offset) and (offset.min() < 0 or offset.max() >= len(self.table)):
                inside = (offset >= 0) & (offset < len(self.table))
                return np.where(inside, self.table[np.where(inside, offset, 0)], -1)
            return self.table[offset]
        position = np.minimum(np.searchsorted(self.sorted, keys), self.size - 1)
        return np.where(self.sorted[position] == keys, self.order[position], -1)


class TensorStates:
    """Some tensor states: their ids, per-state numpy columns (name -> (values, validity))
    and their shapes (a chunked list array, or None when no rule reads shapes)."""

    def __init__(self, ids: np.ndarray, columns: dict, shape: pa.ChunkedArray | None) -> None:
        self.ids, self.columns, self.shape = ids, columns, shape
        self._index: Index | None = None

    @property
    def index(self) -> Index:
        if self._index is None:
            self._index = Index(self.ids)
        return self._index

    @classmethod
    def from_arrow(cls, table: pa.Table) -> TensorStates:
        columns = {name: numpy_column(table.column(name)) for name in table.column_names[1:] if name != "shape"}
        shape = table.column("shape") if "shape" in table.column_names else None
        return cls(numpy_column(table.column("tensor_id"))[0].astype(np.int64), columns, shape)

    def take(self, rows: np.ndarray) -> TensorStates:
        columns = {n: (v[rows], None if ok is None else ok[rows]) for n, (v, ok) in self.columns.items()}
        shape = None if self.shape is None else pa.chunked_array([take_rows(self.shape, rows)], self.shape.type)
        return TensorStates(self.ids[rows], columns, shape)

    @staticmethod
    def concat(parts: list[TensorStates]) -> TensorStates:
        parts = [p for p in parts if len(p.ids)] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        columns = {}
        for name in parts[0].columns:
            values = np.concatenate([p.columns[name][0] for p in parts])
            valid = None
            if any(p.columns[name][1] is not None for p in parts):
                valid = np.concatenate([np.ones(len(p.ids), bool) if p.columns[name][1] is None
                                        else p.columns[name][1] for p in parts])
            columns[name] = (values, valid)
        shape = None if parts[0].shape is None else pa.chunked_array(
            [c for p in parts if p.shape is not None for c in p.shape.chunks], parts[0].shape.type)  # all or none have one
        return TensorStates(np.concatenate([p.ids for p in parts]), columns, shape)


def take_sorted(column: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """column.take(rows) for sorted rows, one chunk at a time (DuckDB's results come in many
    small chunks, and a take across them costs far more)."""
    ends = np.cumsum([len(c) for c in column.chunks])
    cut = np.searchsorted(rows, ends)
    pieces = [chunk.take(pa.array(rows[start:stop] - (end - len(chunk))))
              for chunk, end, start, stop in zip(column.chunks, ends, [0, *cut[:-1]], cut) if stop > start]
    return pa.concat_arrays(pieces) if pieces else pa.array([], column.type)


def take_rows(column: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """column.take(rows), any rows."""
    order = np.argsort(rows, kind="stable")
    taken = take_sorted(column, rows[order])
    return taken.take(pa.array(np.argsort(order, kind="stable"))) if len(rows) else taken


def unique_keys(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_inverse=True) for keys in [0, size), by a table when it is small."""
    if size > 4 * len(keys) + 4096:
        return np.unique(keys, return_inverse=True)
    seen = np.zeros(size, dtype=bool)
    seen[keys] = True
    number = np.cumsum(seen) - 1
    return np.flatnonzero(seen), number[keys]
