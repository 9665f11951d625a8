"""capture/store/table_buffer.py: rows held as interned group tuples come back as they went in, and
the buffer's size estimate (what flush_bytes bounds) follows what the rows really hold."""

from __future__ import annotations

import sys

import pytest

from spiketrace.capture.store import table_buffer
from spiketrace.capture.store.flat_lists import FlatIntLists
from spiketrace.capture.store.table_buffer import INT_COLUMN_TYPES, TableBuffer, _size
from spiketrace.schemas.tables import TABLES


def _hook_row(i: int) -> dict:
    # ten distinct hooks (module, kind) recurring every "step", as a training loop's hooks do
    return dict(seq=i, kind=("forward_pre", "forward_post")[i % 2], module_id=i % 10, tracker_name=f"layer{i % 10}",
                call_index=i // 10, step=i // 10, stage_id=i // 10, stage="forward", phase="forward",
                grad_enabled=True, training=True, thread=0, inputs=(i, i + 1), outputs=None, kwarg_inputs=None,
                inputs_require_grad=False, recompute=False)


def _held_bytes(buffer: TableBuffer) -> int:
    """Each column's storage plus every distinct object its rows hold, each counted once."""
    seen, total = set(), 0
    for column in buffer.columns.values():
        if isinstance(column, FlatIntLists):  # two arrays, no object per row
            total += sys.getsizeof(column.values) + sys.getsizeof(column.lengths)
            continue
        total += sys.getsizeof(column)
        if not isinstance(column, INT_COLUMN_TYPES):
            for value in column:
                if id(value) not in seen:
                    seen.add(id(value))
                    total += _size(value)
    return total


def test_group_tuples_are_interned_and_unzipped_in_order():
    buffer = TableBuffer("module_events", TABLES["module_events"])
    rows = [_hook_row(i) for i in range(100)]
    for row in rows:
        buffer.append(**row)
    hooks = buffer.columns["$hook"]
    assert len({id(t) for t in hooks}) == 10  # one object per distinct hook, whatever the step
    got = buffer.to_arrow(buffer.complete_rows()).to_pylist()
    expected = [{**row, "inputs": list(row["inputs"])} for row in rows]
    assert got == expected


def test_the_estimate_charges_a_shared_tuple_once():
    """10,000 rows of 10 recurring hooks: the tuples cost 10 objects, not 10,000 (the old
    estimate charged every row a whole tuple: about 2.5x what the buffers held)."""
    buffer = TableBuffer("module_events", TABLES["module_events"])
    for i in range(10_000):
        buffer.append(**_hook_row(i))
    held, estimate = _held_bytes(buffer), buffer.buffered_bytes()
    assert 0.8 * held <= estimate <= 1.25 * held, (estimate, held)


def test_the_estimate_charges_objects_of_their_own_in_full():
    """Every row holds a tuple of its own (inputs): each is charged its whole size."""
    buffer = TableBuffer("module_events", TABLES["module_events"])
    for i in range(5_000):
        buffer.append(**{**_hook_row(i), "outputs": tuple(range(i % 7 + 1))})
    held, estimate = _held_bytes(buffer), buffer.buffered_bytes()
    assert 0.8 * held <= estimate <= 1.25 * held, (estimate, held)


@pytest.mark.parametrize("grouping", ["compiled", "python"])
def test_to_arrow_gives_each_row_its_own_group_values_whether_shared_equal_or_unhashable(grouping, monkeypatch):
    # The writer converts each distinct group tuple once (by identity) and takes it per row,
    # grouping the rows in C (capture/native/_native.c identity_codes) or, without it, in Python.
    if grouping == "compiled" and table_buffer.identity_codes is None:
        pytest.skip("spiketrace.capture.native._native not built")
    if grouping == "python":
        monkeypatch.setattr(table_buffer, "identity_codes", None)
    # Rows here: shared interned tuples, equal tuples that are distinct objects, tuples with a
    # list member (unhashable: never interned) and None members; every row must come back
    # with exactly the values it was appended with, in order.
    buffer = TableBuffer("tensors", TABLES["tensors"])
    forms = [((2, 3), (3, 1), 0, 6, None, "float32", 4, "cpu", False, False, False, None),
             ((2, None, 4), (), 0, 20, ((2, 4), (3, 4)), "int64", 8, "cpu", True, False, True, "fc.weight")]
    expected = []
    for i in range(300):
        if i % 3 == 0:
            form = forms[i % 2]  # shared
        elif i % 3 == 1:
            form = tuple(list(forms[i % 2]))  # equal, a distinct object
        else:
            form = ([i, 1], [1, 1], i, i, None, "bool", 1, "meta", False, True, False, None)  # list members
        columns = buffer.columns
        for name, value in (("tensor_id", i), ("uid", i // 2), ("version", 0), ("first_seq", i), ("storage_ptr", 7 * i),
                            ("nnz", -1 if i % 5 == 0 else i), ("is01", -1 if i % 5 == 0 else i % 2)):
            columns[name].append(value)
        columns["$form"].append(form)
        expected.append(form)
    table = buffer.to_arrow(buffer.complete_rows())
    assert table.num_rows == 300
    members = buffer.groups["$form"]
    for k, member in enumerate(members):
        want = [[list(v) if isinstance(v, tuple) else v for v in f[k]] if isinstance(f[k], (tuple, list)) else f[k]
                for f in expected]
        assert table.column(member).to_pylist() == want, member
    assert table.column("tensor_id").to_pylist() == list(range(300))
    assert table.column("nnz").to_pylist() == [None if i % 5 == 0 else i for i in range(300)]
    assert buffer.field_values()["shape"] == [f[0] for f in expected]  # the tools' row-order view agrees


def test_to_arrow_leaves_the_collector_as_it_found_it():
    import gc

    buffer = TableBuffer("module_events", TABLES["module_events"])
    buffer.append(**_hook_row(0))
    assert gc.isenabled()
    buffer.to_arrow(buffer.complete_rows())
    assert gc.isenabled()
    gc.disable()
    try:
        buffer.to_arrow(buffer.complete_rows())
        assert not gc.isenabled()  # a script that runs with it off keeps it off
    finally:
        gc.enable()


def test_clear_drops_a_partial_row_too_and_counts_what_it_dropped():
    # A failed flush clears every buffer (writer._drop_buffers); a row cut short by a failure
    # (one column longer) must go with the rest, and `dropped` moves by the rows that were there.
    buffer = TableBuffer("module_events", TABLES["module_events"])
    for i in range(3):
        buffer.append(**_hook_row(i))
    buffer.columns["step"].append(9)  # part of a fourth row, never finished (not in the first column)
    assert buffer.complete_rows() == 3
    buffer.clear()
    assert all(len(column) == 0 for column in buffer.columns.values())
    assert buffer.dropped == 4


def _use_row(seq: int, k: int) -> dict:
    return dict(seq=seq, k=k, role="arg", position=k, name=None, item=None, tensor_id=100 * seq + k)


def _fill_uses(buffer: TableBuffer, counts: dict[int, int]) -> list[dict]:
    """Events `seq` with `counts[seq]` tensors each, appended as the per-op paths do: the rows'
    slot and tensor id, then the event's seq and row count once (an event with none: no run)."""
    rows = []
    for seq, count in counts.items():
        for k in range(count):
            row = _use_row(seq, k)
            buffer.columns["$slot"].append((row["role"], row["position"], row["name"], row["item"]))
            buffer.columns["tensor_id"].append(row["tensor_id"])
            rows.append(row)
        if count:
            buffer.run_values.append(seq)
            buffer.run_lengths.append(count)
    return rows


@pytest.mark.parametrize("columns", ["compiled", "array"])
def test_event_tensor_runs_expand_to_each_rows_seq_and_k(columns, monkeypatch):
    # Events 5..9 with 3, 1, 0, 2 and 4 tensors: the buffer holds 4 runs, the table 10 rows whose
    # seq repeats per event and whose k counts 0, 1, ... within it, as the rows were appended;
    # the same with array.array columns (an install without the compiled extension)
    if columns == "array":
        monkeypatch.setattr(table_buffer, "IntColumn", None)
    buffer = TableBuffer("event_tensors", TABLES["event_tensors"])
    assert (type(buffer.run_values).__name__ == "array") == (columns == "array")
    rows = _fill_uses(buffer, {5: 3, 6: 1, 7: 0, 8: 2, 9: 4})
    assert len(buffer) == buffer.complete_rows() == 10 and list(buffer.run_lengths) == [3, 1, 2, 4]
    assert buffer.to_arrow(10).to_pylist() == rows
    values = buffer.field_values()
    assert list(values["seq"]) == [r["seq"] for r in rows] and list(values["k"]) == [r["k"] for r in rows]
    # a flush of the first two events' rows leaves the rest, still expanding from 0
    assert buffer.to_arrow(4).to_pylist() == rows[:4]
    buffer.drop_first(4)
    assert list(buffer.run_values) == [8, 9] and buffer.to_arrow(6).to_pylist() == rows[4:]
    with pytest.raises(AssertionError, match="inside a run"):
        buffer.to_arrow(1)


def test_rows_without_their_run_are_not_complete_and_a_partial_event_is_dropped():
    # an event cut short after two of its rows, before its run was appended: not flushed, and
    # drop_partial_row removes exactly those two rows
    buffer = TableBuffer("event_tensors", TABLES["event_tensors"])
    rows = _fill_uses(buffer, {1: 2})
    buffer.columns["$slot"].extend([("arg", 0, None, None)] * 2)
    buffer.columns["tensor_id"].extend([7, 8])
    assert len(buffer) == 4 and buffer.complete_rows() == 2
    assert buffer.to_arrow(buffer.complete_rows()).to_pylist() == rows
    buffer.drop_partial_row()
    assert len(buffer) == 2 and list(buffer.run_lengths) == [2]
    buffer.clear()
    assert len(buffer) == 0 and not buffer.run_values and not buffer.run_lengths


def test_append_extends_the_run_of_its_seq_and_names_a_row_that_breaks_it():
    buffer = TableBuffer("event_tensors", TABLES["event_tensors"])
    rows = [_use_row(3, 0), _use_row(3, 1), _use_row(4, 0)]
    for row in rows:
        buffer.append(**row)
    assert list(buffer.run_values) == [3, 4] and list(buffer.run_lengths) == [2, 1]
    assert buffer.to_arrow(3).to_pylist() == rows
    with pytest.raises(ValueError, match=r"event_tensors: row k=5 of seq=4"):
        buffer.append(**_use_row(4, 5))


def test_flat_id_lists_round_trip_null_rows_null_items_and_empty_rows():
    # module_events inputs as hooks write them: a tuple of ids (None for a None tensor) or None
    buffer = TableBuffer("module_events", TABLES["module_events"])
    rows = [_hook_row(i) for i in range(6)]
    rows[1]["inputs"], rows[2]["inputs"], rows[3]["inputs"] = None, (), (7, None, 9)
    rows[4]["outputs"] = (11,)
    for row in rows:
        buffer.append(**row)
    assert isinstance(buffer.columns["inputs"], FlatIntLists)
    # the flat values: 0,1 | (null row) | (empty) | 7,null,9 | 4,5 | 5,6
    assert list(buffer.columns["inputs"].lengths) == [2, -1, 0, 3, 2, 2]
    table = buffer.to_arrow(6).to_pylist()
    expected = [None if r is None else list(r) for r in (row["inputs"] for row in rows)]
    assert [t["inputs"] for t in table] == expected
    assert [t["outputs"] for t in table] == [None, None, None, None, [11], None]
    assert buffer.field_values()["inputs"] == [row["inputs"] for row in rows]
    # a written prefix and a partial suffix go as a list column's would
    buffer.drop_first(2)
    del buffer.columns["inputs"][3:]
    assert buffer.columns["inputs"].rows() == [(), (7, None, 9), (4, 5)] and list(buffer.columns["inputs"].values)[-2:] == [4, 5]
    # a row with a value that is not an id is refused whole
    with pytest.raises(TypeError):
        buffer.columns["inputs"].append((8, "x"))
    assert buffer.columns["inputs"].rows() == [(), (7, None, 9), (4, 5)] and len(buffer.columns["inputs"].values) == 5
