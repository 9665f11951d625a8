"""One table's pending rows, held column by column until the writer flushes them.

Rows are appended to one list per column, so no Python object is created per row (list-typed
cells hold the tuple the caller already had, e.g. a torch.Size, which the cyclic GC untracks).
Non-nullable integer columns (seq numbers, ids, sizes) are integer arrays instead, as wide as
their type (array.array, or in the compiled record's tables capture/native/scan/column.c's
IntColumn), so no int object is kept per row; fields repeating together are one interned
tuple a row (BUFFER_GROUPS), an op's event_tensors seq and k one run an event (BUFFER_RUNS),
and a hook's tensor id lists flat (FLAT_LISTS). `buffered_bytes` adds up what the buffers
really hold, so the writer can bound it. Pure pyarrow, no torch.
"""

from __future__ import annotations

import gc
import sys
from array import array
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spiketrace.capture.store.flat_lists import FlatIntLists

try:  # the compiled grouping of a flush (capture/native/scan/codes.c); the Python one does the same, slower
    from spiketrace.capture.native._native import identity_codes
except ImportError:
    identity_codes = None
try:  # the compiled record's integer columns (capture/native/scan/column.c); array.array without it
    from spiketrace.capture.native._native import IntColumn
except ImportError:
    IntColumn = None


# The tables the compiled record appends to for every op: their integer columns are IntColumns,
# which it fills with C integers (capture/native/scan/column.c); other tables keep array.array.
COMPILED_RECORD_TABLES = frozenset({"events", "event_tensors", "tensors", "tensor_frees"})
# What an integer column is, either way.
INT_COLUMN_TYPES = (array,) if IntColumn is None else (array, IntColumn)

# array typecodes by integer width (in bits): a column takes no more bytes a value than its type.
_TYPECODES = {8: "b", 16: "h", 32: "i", 64: "q"}
# Nullable columns held as arrays all the same, a value they never take standing for null:
# one byte (is01) or eight (nnz) a row instead of a list slot and, for nnz, an int object.
NULL_SENTINELS: dict[str, dict[str, int]] = {"tensors": {"nnz": -1, "is01": -1}}


def _typecode(f: pa.Field, sentinels: dict[str, int]) -> str | None:
    """The array typecode of a column held as an array, None for a list: a non-nullable
    integer column, or a nullable integer or bool column with a null sentinel."""
    if f.name in sentinels:
        return "b" if pa.types.is_boolean(f.type) else _TYPECODES[f.type.bit_width]
    if pa.types.is_integer(f.type) and not f.nullable:
        return _TYPECODES[f.type.bit_width]
    return None


# Fields that change together and repeat from row to row, held as one interned tuple per row
# (the hot paths keep one object per distinct combination): one append and one 8-byte slot a
# row instead of one per field. A flush converts each distinct tuple once (TableBuffer.to_arrow).
BUFFER_GROUPS: dict[str, dict[str, tuple[str, ...]]] = {
    "events": {"$stage": ("step", "stage_id", "stage", "phase"),
               "$where": ("grad_enabled", "in_backward", "thread", "scope_id", "recompute"),
               "$call": ("op", "args", "kwargs", "out")},
    "event_tensors": {"$slot": ("role", "position", "name", "item")},
    "tensors": {"$form": ("shape", "stride", "storage_offset", "numel", "nested_shapes", "dtype", "element_size",
                          "device", "requires_grad", "is_meta", "is_parameter", "parameter")},
    # appended with append(), which interns each group's tuple itself
    # (not step or stage_id: they change every step, and a step's hook rows are all distinct)
    "module_events": {"$hook": ("kind", "module_id", "tracker_name", "stage", "phase", "grad_enabled", "training",
                                "thread", "inputs_require_grad", "recompute")},
    "optimizer_steps": {"$parameter": ("optimizer_index", "optimizer_class", "group_index", "hyperparameters",
                                       "param_index", "parameter", "module_id", "shape", "ndim", "numel", "dtype",
                                       "has_grad", "state_keys")},
}
# Distinct tuples append() keeps per group before it starts over (a bound on the memo, not on the rows).
INTERNED_PER_GROUP = 65536

# list<int64> fields held flat (FlatIntLists): a module hook's tensor ids.
FLAT_LISTS: dict[str, tuple[str, ...]] = {"module_events": ("inputs", "outputs", "kwarg_inputs")}

# Fields held once per run of consecutive rows instead of once per row: (the field whose value
# a run shares, the field numbering the rows within their run from 0). An op's event_tensors
# rows are appended together, so the buffer holds its seq and row count once per event, not a
# seq and a k per row (an op has a few rows: two values and two appends less for each); a flush
# expands them in Arrow (TableBuffer.to_arrow).
BUFFER_RUNS: dict[str, tuple[str, str]] = {"event_tensors": ("seq", "k")}


@contextmanager
def collector_paused():
    """Python's cyclic collector off while a flush unzips its buffers, and back as it was.

    Unzipping a 200k-row buffer makes column lists of 200k items each; while they are young,
    every young-generation collection (one per ~700 allocations, and pyarrow's conversion
    makes many) walks all of them, which makes a large flush several times slower. These
    lists hold no cycles, so pausing frees
    nothing later than it would be freed. Only turned back on if it was on: a script that
    runs with the collector off keeps it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class TableBuffer:
    """The pending rows of one table: `columns[name]` is a plain list per field (list-typed
    fields hold a sequence, e.g. a torch.Size, or None per row), or an array('q') for a
    non-nullable integer field. Both append, index, `del column[n:]` and `len()` alike.
    A group of BUFFER_GROUPS is one list column named after the group, holding a tuple of
    its fields' values per row (in the group's order) instead of those fields' columns."""

    def __init__(self, name: str, schema: pa.Schema, groups: dict[str, tuple[str, ...]] | None = None) -> None:
        self.name = name
        self.schema = schema
        self.groups = dict(BUFFER_GROUPS.get(name, {}) if groups is None else groups)
        grouped = {member for members in self.groups.values() for member in members}
        unknown = grouped - set(schema.names)
        if unknown:
            raise AssertionError(f"buffer groups of {name} name fields it does not have: {sorted(unknown)}")
        # null stands as this value in these array columns (appenders write it for None)
        self.sentinels = dict(NULL_SENTINELS.get(name, {}))
        # Rows dropped from the front so far (written or discarded): a row's number since the
        # buffer began, less this, is its index now (TensorRegistry.pending keeps numbers).
        self.dropped = 0
        # A table with BUFFER_RUNS: each run's shared value and its row count (appended once
        # its rows are: a run's rows are complete when the run is); empty and unused without runs.
        self.runs = BUFFER_RUNS.get(name)
        int_column = IntColumn if IntColumn is not None and name in COMPILED_RECORD_TABLES else array
        self.run_values = int_column("q")
        self.run_lengths = int_column("i")
        # A list, an integer array (array or IntColumn) or a FlatIntLists per column, each told
        # apart where it matters: the record paths know each column's kind by its field.
        self.columns: dict[str, Any] = {}
        flat = FLAT_LISTS.get(name, ())
        for f in schema:
            if f.name in flat:
                self.columns[f.name] = FlatIntLists()
            elif f.name not in grouped and (self.runs is None or f.name not in self.runs):
                typecode = _typecode(f, self.sentinels)
                self.columns[f.name] = [] if typecode is None else int_column(typecode)
        for group in self.groups:
            self.columns[group] = []
        self._interned: dict[str, dict[tuple, tuple]] = {group: {} for group in self.groups}
        # (field, error) of each column a flush wrote with values nulled (_array), for `degraded`
        self.unconvertible: list[tuple[str, Exception]] = []

    def clear(self) -> None:
        if self.runs is not None:  # a run may not cover the partial row: forget runs and rows alike
            del self.run_values[:], self.run_lengths[:]
            for column in self.columns.values():
                del column[:]
            return
        self.drop_first(max(len(column) for column in self.columns.values()))  # a partial row too

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def drop_partial_row(self) -> None:
        """Remove a row whose append was cut short by a failure (some columns one longer). In a
        table with runs a run is one record's rows, kept whole or not at all: rows past the last
        run (a record still appending, or cut short before its run) go, and so does a run that
        its rows no longer fill, with the rows it holds, so every later row stays in its run."""
        complete = self.complete_rows()
        if self.runs is not None:
            kept = self._runs_within(complete)
            del self.run_values[kept:], self.run_lengths[kept:]
            complete = sum(self.run_lengths)
        for column in self.columns.values():
            del column[complete:]

    def append(self, **values) -> None:
        """Append one row; for the tables written once per hook or step, not per op (hot paths
        fill columns directly). A group's tuple is interned: equal rows share one object."""
        groups, sentinels = self.groups, self.sentinels
        if self.runs is not None:
            self._append_to_run(values.get(self.runs[0]), values.get(self.runs[1]))
        for name, column in self.columns.items():
            members = groups.get(name)
            if members is not None:
                row = tuple(values.get(m) for m in members)
                interned = self._interned[name]
                try:
                    row = interned.setdefault(row, row)
                except TypeError:  # a list-valued member: unhashable, kept as it is
                    pass
                else:
                    if len(interned) > INTERNED_PER_GROUP:
                        interned.clear()
                column.append(row)
            else:
                value = values.get(name)
                column.append(sentinels[name] if value is None and name in sentinels else value)

    def field_values(self) -> dict[str, list | array]:
        """Every field's values in row order, groups unzipped into their fields (tests and
        tools; the writer uses to_arrow, which unzips each distinct group tuple once)."""
        fields = {name: column.rows() if isinstance(column, FlatIntLists) else column
                  for name, column in self.columns.items() if name not in self.groups}
        for group, members in self.groups.items():
            rows = self.columns[group]
            unzipped = list(zip(*rows)) if rows else [()] * len(members)
            fields.update({member: list(values) for member, values in zip(members, unzipped)})
        if self.runs is not None:
            value_field, index_field = self.runs
            fields[value_field] = [v for v, n in zip(self.run_values, self.run_lengths) for _ in range(n)]
            fields[index_field] = [k for n in self.run_lengths for k in range(n)]
        return fields

    def complete_rows(self) -> int:
        """Rows every column holds (a row being appended elsewhere is not complete yet), and
        that a run covers in a table with runs."""
        rows = min(len(column) for column in self.columns.values())
        return rows if self.runs is None else min(rows, sum(self.run_lengths))

    def _runs_within(self, rows: int) -> int:
        """How many runs lie within the first `rows` rows."""
        if rows >= sum(self.run_lengths):  # a flush of every complete row: no walk
            return len(self.run_lengths)
        total = 0
        for count, length in enumerate(self.run_lengths):
            total += length
            if total > rows:
                return count
        return len(self.run_lengths)

    def _append_to_run(self, value, index) -> None:
        """append()'s run fields: row `index` of the last run, or row 0 of a new one."""
        if self.run_lengths and self.run_values[-1] == value and self.run_lengths[-1] == index:
            self.run_lengths[-1] += 1
        elif index == 0:
            self.run_values.append(value)
            self.run_lengths.append(1)
        else:
            assert self.runs is not None  # append() runs this for a table with runs only
            raise ValueError(f"{self.name}: row {self.runs[1]}={index} of {self.runs[0]}={value} "
                             f"does not follow the rows before it")

    def _run_arrays(self, rows: int) -> dict[str, pa.Array]:
        """The run fields of the first `rows` rows, expanded: each run's value repeated over its
        rows, and each row's number within its run (run-end decoding, in Arrow)."""
        assert self.runs is not None  # called for a table with runs only
        value_field, index_field = self.runs
        taken = self._runs_within(rows)
        lengths = _int_values(self.run_lengths, taken).cast(pa.int32())
        values = _int_values(self.run_values, taken).cast(pa.int64())
        ends = pc.cumulative_sum(lengths)
        if (ends[-1].as_py() if taken else 0) != rows:  # the rows the taken runs cover
            raise AssertionError(f"{self.name}: {rows} rows end inside a run")
        if rows == 0:
            return {value_field: pa.array([], pa.int64()).cast(self.schema.field(value_field).type),
                    index_field: pa.array([], self.schema.field(index_field).type)}
        starts = pc.subtract(ends, lengths)
        decode = lambda per_run: pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, per_run))  # noqa: E731 - a one-line helper
        row_numbers = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int32()), rows)), 1)
        return {value_field: decode(values).cast(self.schema.field(value_field).type),
                index_field: pc.subtract(row_numbers, decode(starts)).cast(self.schema.field(index_field).type)}

    def to_arrow(self, rows: int) -> pa.Table:
        """The first `rows` rows (complete_rows() when the flush began) as an Arrow table.

        Rows may be appended while this runs, by weakref callbacks (tensor_frees) and other
        threads' records: they are left for the next flush, not half taken."""
        with collector_paused():
            grouped = {}
            for group, members in self.groups.items():
                grouped.update(self._group_arrays(self.columns[group][:rows], members))
            if self.runs is not None:
                grouped.update(self._run_arrays(rows))
            arrays = [grouped[f.name] if f.name in grouped else self._column_array(f, rows) for f in self.schema]
            return pa.Table.from_arrays(arrays, schema=self.schema)

    def drop_first(self, rows: int) -> None:
        """Forget the first `rows` rows, once they are written (in place: hot paths hold these lists)."""
        if self.runs is not None:
            taken = self._runs_within(rows)
            del self.run_values[:taken], self.run_lengths[:taken]
        for column in self.columns.values():
            del column[:rows]
        self.dropped += rows

    def _column_array(self, f: pa.Field, rows: int) -> pa.Array:
        column = self.columns[f.name]
        if isinstance(column, FlatIntLists):
            return column.to_arrow(rows, f.type)
        if not isinstance(column, INT_COLUMN_TYPES):
            return self._array(column[:rows], f)
        values = _int_values(column, rows)
        sentinel = self.sentinels.get(f.name)
        if sentinel is not None:
            values = pc.if_else(pc.equal(values, sentinel), pa.scalar(None, values.type), values)
        return values.cast(f.type)

    def _group_arrays(self, rows: list, members: tuple[str, ...]) -> dict[str, pa.Array]:
        """The member columns of a group: each distinct row tuple (by identity: the hot paths
        share one tuple among equal rows) converted once, then taken by row in Arrow. A flush
        holds few distinct call and context tuples among its many rows, so this converts a
        value a distinct tuple, not a value a row. Every row object is alive in `rows`
        while this runs, so an id names one object."""
        types = {member: self.schema.field(member).type for member in members}
        if not rows:
            return {member: pa.array([], type=types[member]) for member in members}
        indices, distinct = _distinct_by_identity(rows)
        return {member: self._array(values, self.schema.field(member)).take(indices)
                for member, values in zip(members, zip(*distinct))}

    def _array(self, values, f: pa.Field) -> pa.Array:
        """`values` as field `f`'s Arrow array. A value its type cannot hold (a SymInt such as a
        nested int `j1`, which the record paths keep out of every row) would fail the flush and
        so the whole trace: it is null instead, where `f` allows, and named in `unconvertible`."""
        try:
            return pa.array(values, type=f.type)
        except (ValueError, TypeError) as exc:  # pyarrow's ArrowInvalid and ArrowTypeError among them
            nulled = [_nulled(v, f.type) for v in values]
            if not f.nullable and any(v is None for v in nulled):
                raise
            self.unconvertible.append((f.name, exc))
            return pa.array(nulled, type=f.type)

    def buffered_bytes(self, sample: int = 64) -> int:
        """What the pending rows hold in memory: each column's storage, and for list columns
        the objects in it, sized on `sample` rows spread evenly over the buffer (a step's rows
        differ from its start to its end). An object is shared by the rows that
        hold it (an interned group tuple, shape or argument string), so each row is charged its
        size over the references to it (sys.getrefcount, less the ones this count makes): an
        interned tuple in every row costs a pointer, one of its own its whole size."""
        total = 0 if self.runs is None else sys.getsizeof(self.run_values) + sys.getsizeof(self.run_lengths)
        for column in self.columns.values():
            if isinstance(column, FlatIntLists):
                total += column.nbytes()
                continue
            total += sys.getsizeof(column)
            if not isinstance(column, INT_COLUMN_TYPES) and column:
                tail = column[::max(1, len(column) // sample)]
                occurrences: dict[int, int] = {}
                for value in tail:
                    occurrences[id(value)] = occurrences.get(id(value), 0) + 1
                charged = 0.0
                for value in {id(v): v for v in tail}.values():
                    # references: the buffer's rows (and a memo's), the sample's, the dict's, this
                    # loop variable's and getrefcount's argument
                    holders = max(1, sys.getrefcount(value) - occurrences[id(value)] - 3)
                    charged += _size(value) * occurrences[id(value)] / holders
                total += int(charged * len(column) / len(tail))
        return total


def _int_values(column, rows: int) -> pa.Array:
    """The first `rows` values of an integer column as an Arrow array of its items' width now
    (an IntColumn's 'q' items are 4 bytes until one needs 8): a copy of its buffer, so the
    column stays resizable."""
    width = {1: pa.int8(), 2: pa.int16(), 4: pa.int32()}.get(column.itemsize, pa.int64())
    return pa.Array.from_buffers(width, rows, [None, pa.py_buffer(column.tobytes())])


def _distinct_by_identity(rows: list) -> tuple[pa.Array, list]:
    """Each row's index among the distinct objects of `rows` (by identity), and those objects."""
    if identity_codes is not None:
        codes, distinct = identity_codes(rows)
        return pa.Array.from_buffers(pa.int32(), len(rows), [None, pa.py_buffer(codes)]), distinct
    encoded = pa.array(map(id, rows), type=pa.uint64(), size=len(rows)).dictionary_encode()
    by_id = dict(zip(map(id, rows), rows))
    return encoded.indices, [by_id[i] for i in encoded.dictionary.to_pylist()]


def _nulled(value, type_: pa.DataType):
    """`value` with each part `type_` cannot hold null: a list's items one by one (a shape
    keeps its other sizes)."""
    if value is not None and pa.types.is_list(type_) and isinstance(value, (list, tuple)):
        return [_nulled(v, type_.value_type) for v in value]
    try:
        pa.scalar(value, type=type_)
        return value
    except (ValueError, TypeError):
        return None


def _size(value) -> int:
    if value is None or value is True or value is False:
        return 0
    if isinstance(value, tuple):
        return sys.getsizeof(value) + sum(sys.getsizeof(v) for v in value if not (-5 <= v <= 256 if type(v) is int else False))
    return sys.getsizeof(value)


