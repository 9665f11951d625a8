"""spiketrace.capture.native._native.IntColumn (capture/native/_native_column.c) behaves as array.array does for what the
buffers do with it, and the record's tables use it: array.array is the oracle."""

from __future__ import annotations

import random
import sys
from array import array

import pytest

from spiketrace.capture.store.table_buffer import COMPILED_RECORD_TABLES, TableBuffer
from spiketrace.schemas.tables import TABLES

native = pytest.importorskip("spiketrace.capture.native._native")
IntColumn = native.IntColumn

WIDTHS = {"b": 8, "h": 16, "i": 32, "q": 64}


@pytest.mark.parametrize("typecode", sorted(WIDTHS))
def test_a_random_sequence_of_buffer_operations_matches_array(typecode):
    # appends at both ends of the width, extends, prefix and suffix deletes (a flush, a partial
    # row), item reads and writes (a resolved statistic, a run's length), slices and counts
    bits = WIDTHS[typecode]
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    rng = random.Random(bits)
    column, oracle = IntColumn(typecode), array(typecode)
    for _step in range(3000):
        op = rng.random()
        if op < 0.5:
            v = rng.choice([low, high, 0, -1, 1, rng.randint(low, high)])
            column.append(v), oracle.append(v)
        elif op < 0.6:
            values = [rng.randint(low, high) for _ in range(rng.randint(0, 5))]
            column.extend(values), oracle.extend(values)
        elif op < 0.65 and oracle:
            n = rng.randint(0, len(oracle))
            del column[:n], oracle[:n]
        elif op < 0.7 and oracle:
            n = rng.randint(0, len(oracle))
            del column[n:], oracle[n:]
        elif op < 0.8 and oracle:
            i = rng.randint(-len(oracle), len(oracle) - 1)
            v = rng.randint(low, high)
            column[i] = v
            oracle[i] = v
        assert len(column) == len(oracle)
        if oracle:
            i = rng.randint(-len(oracle), len(oracle) - 1)
            assert column[i] == oracle[i]
    a, b = sorted(rng.randint(-len(oracle), len(oracle)) for _ in range(2))
    assert column[a:b] == list(oracle[a:b]) and column[::3] == list(oracle[::3])
    assert list(column) == list(oracle) and sum(column) == sum(oracle)
    # its items are as wide as its values need (a 'q' column: 4 bytes until a value needs 8)
    narrow = {"q": "i"} if all(-(1 << 31) <= v < (1 << 31) for v in oracle) else {}
    assert column.tobytes() == array(narrow.get(typecode, typecode), oracle).tobytes()
    assert column.typecode == typecode and column.count(0) == oracle.count(0) and column.count("x") == 0


@pytest.mark.parametrize("typecode", sorted(WIDTHS))
def test_a_value_past_the_width_is_refused_and_leaves_the_column_as_it_was(typecode):
    bits = WIDTHS[typecode]
    column = IntColumn(typecode)
    column.append(1)
    too_big, too_small = 1 << (bits - 1), -(1 << (bits - 1)) - 1
    for bad in (too_big, too_small):
        with pytest.raises(OverflowError):
            column.append(bad)
        with pytest.raises(OverflowError):
            array(typecode).append(bad)  # the oracle refuses it too
    with pytest.raises(OverflowError):
        column.extend([2, 3, too_big])  # all or nothing
    with pytest.raises(TypeError):
        column.append("4")
    assert list(column) == [1]


def test_a_q_column_widens_in_place_when_a_value_needs_eight_bytes():
    # 1000 small values held in 4 bytes each; a pointer-sized value widens all of them to 8,
    # keeping every value; set_item widens too
    column = IntColumn("q")
    column.extend(range(-500, 500))
    assert column.itemsize == 4
    column.append(0x7F00_0000_1000)
    assert column.itemsize == 8 and list(column) == [*range(-500, 500), 0x7F00_0000_1000]
    other = IntColumn("q")
    other.extend([1, 2, 3])
    other[1] = -(1 << 40)
    assert other.itemsize == 8 and list(other) == [1, -(1 << 40), 3]


def test_a_column_of_each_width_becomes_the_same_arrow_column(tmp_path):
    # the writer reads an IntColumn's items at their width now and casts to the schema's type
    from spiketrace.analyze import open_trace
    from spiketrace.capture.store.writer import TraceWriter
    writer = TraceWriter(tmp_path / "t")
    frees = writer.tables["tensor_frees"]
    frees.append(uid=3, freed_seq=7)
    frees.append(uid=(1 << 40) + 5, freed_seq=8)  # widens the uid column mid-buffer
    writer.close()
    with open_trace(tmp_path / "t") as trace:
        assert trace.arrow("SELECT uid, freed_seq FROM tensor_frees ORDER BY freed_seq").to_pylist() == [
            {"uid": 3, "freed_seq": 7}, {"uid": (1 << 40) + 5, "freed_seq": 8}]


def test_misuse_is_a_clear_error():
    with pytest.raises(ValueError, match="typecode 'd'"):
        IntColumn("d")
    column = IntColumn("q")
    with pytest.raises(IndexError):
        column[0]
    column.append(5)
    with pytest.raises(TypeError, match="slices"):
        del column[0]
    with pytest.raises(TypeError):
        column[0:1] = [1]


def test_the_compiled_records_tables_hold_int_columns_and_report_their_memory():
    for name in COMPILED_RECORD_TABLES:
        buffer = TableBuffer(name, TABLES[name])
        ints = [c for c in buffer.columns.values() if not isinstance(c, list)]
        assert ints and all(isinstance(c, IntColumn) for c in ints), name
    column = IntColumn("q")
    column.extend(range(10_000))
    # its items are counted in its size, as an array's are (the writer bounds what it holds),
    # at 4 bytes each while every value fits them
    assert column.itemsize == 4 and 4 * 10_000 <= sys.getsizeof(column) < 4 * 10_000 * 1.25 + 1024
    del column[:9_990]
    assert sys.getsizeof(column) < 4 * 10_000 / 2  # a flushed buffer gives its memory back
