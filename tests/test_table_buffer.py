"""capture/table_buffer.py: rows held as interned group tuples come back as they went in, and
the buffer's size estimate (what flush_bytes bounds) follows what the rows really hold."""

from __future__ import annotations

import sys
from array import array

from capture.table_buffer import TableBuffer, _size
from schemas.tables import TABLES


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
        total += sys.getsizeof(column)
        if not isinstance(column, array):
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
    got = buffer.to_arrow().to_pylist()
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
