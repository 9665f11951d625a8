"""A buffered list<int64> column held flat: every row's values in one array('q'), each row's
length in an array('i').

A module hook's row holds the ids of the tensors it saw (module_events inputs, outputs,
kwarg_inputs); held as a tuple per row, that is a tuple object and an int object per id,
several times the 8 bytes a value and 4 a row the flat arrays hold. A null item (a None
tensor) is kept as its index in a short list, so every int64 value round-trips. It appends,
`len()`s and `del`s a prefix or a suffix as a TableBuffer's list column does, and becomes
its Arrow list column in Arrow. Pure pyarrow.
"""

from __future__ import annotations

import sys
from array import array

import pyarrow as pa
import pyarrow.compute as pc

NULL_ROW = -1  # a row length standing for a null list


class FlatIntLists:
    __slots__ = ("values", "lengths", "null_items")

    def __init__(self) -> None:
        self.values = array("q")
        self.lengths = array("i")
        self.null_items: list[int] = []  # indices into values of null items (a hook's None tensor: rare)

    def append(self, row) -> None:
        """One row: a sequence of ints and Nones, or None."""
        if row is None:
            self.lengths.append(NULL_ROW)
            return
        at = len(self.values)
        nulls = [at + i for i, value in enumerate(row) if value is None] if None in row else None
        try:
            self.values.extend(row if nulls is None else [0 if value is None else value for value in row])
        except BaseException:  # array.extend keeps the values before a bad one: no row half written
            del self.values[at:]
            raise
        if nulls:
            self.null_items.extend(nulls)
        self.lengths.append(len(row))

    def __len__(self) -> int:
        return len(self.lengths)

    def _values_in(self, lengths: array) -> int:
        return sum(lengths) + lengths.count(NULL_ROW)  # a null row's -1 counted back as 0 values

    def __delitem__(self, rows: slice) -> None:
        """del column[:n] or del column[n:], as a list column's prefix or suffix."""
        if rows.step is not None or (rows.start is not None and rows.stop is not None):
            raise TypeError("FlatIntLists deletes a prefix or a suffix of its rows only")
        if rows.start is not None:
            start = min(max(rows.start, 0), len(self.lengths))
            kept = self._values_in(self.lengths[:start])
            del self.values[kept:]
            del self.lengths[start:]
            self.null_items = [i for i in self.null_items if i < kept]
        else:
            stop = len(self.lengths) if rows.stop is None else min(max(rows.stop, 0), len(self.lengths))
            dropped = self._values_in(self.lengths[:stop])
            del self.values[:dropped]
            del self.lengths[:stop]
            self.null_items = [i - dropped for i in self.null_items if i >= dropped]

    def rows(self) -> list:
        """Every row as a tuple (None for a null row, None for a null item)."""
        result: list[tuple | None] = []
        at, nulls = 0, set(self.null_items)
        for length in self.lengths:
            if length == NULL_ROW:
                result.append(None)
                continue
            result.append(tuple(None if at + i in nulls else v for i, v in enumerate(self.values[at:at + length])))
            at += length
        return result

    def nbytes(self) -> int:
        return sys.getsizeof(self.values) + sys.getsizeof(self.lengths) + sys.getsizeof(self.null_items) \
            + 32 * len(self.null_items)

    def to_arrow(self, rows: int, list_type: pa.DataType) -> pa.Array:
        """The first `rows` rows as an Arrow list array of `list_type`."""
        lengths = pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(self.lengths.tobytes())])
        null_rows = pc.equal(lengths, NULL_ROW)
        counts = pc.if_else(null_rows, 0, lengths)
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(counts).cast(pa.int32())])
        total = offsets[-1].as_py()
        values = pa.Array.from_buffers(pa.int64(), total, [None, pa.py_buffer(self.values.tobytes())])
        nulls = [i for i in self.null_items if i < total]
        if nulls:
            valid = [True] * total
            for i in nulls:
                valid[i] = False
            values = pc.if_else(pa.array(valid), values, pa.scalar(None, pa.int64()))
        lists = pa.ListArray.from_arrays(offsets, values, mask=null_rows)
        return lists.cast(list_type)
