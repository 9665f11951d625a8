"""The schemas are the contract: documented, versioned, and every column survives a round trip."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spiketrace.analyze import open_trace
from spiketrace.capture.store.table_buffer import BUFFER_RUNS
from spiketrace.capture.store.writer import TraceWriter
from spiketrace.schemas import docs
from spiketrace.schemas.statistics import CONDITIONS, OP_STATISTICS, STATISTICS
from spiketrace.schemas.tables import TABLES, field_doc, table_doc
from spiketrace.schemas.version import SCHEMA_VERSION, SchemaVersionError, check_readable, parse_version


def test_readme_matches_the_schemas():
    text = docs.README.read_text()
    assert docs.generated_section(text) == docs.render(), "run `python -m spiketrace.schemas.docs` to regenerate"
    for name, schema in TABLES.items():
        assert f"### `{name}`" in text
        for f in schema:
            assert f"| `{f.name}` |" in text, (name, f.name)


def test_every_table_and_field_is_described():
    for name, schema in TABLES.items():
        assert table_doc(schema), name
        for f in schema:
            assert len(field_doc(f)) > 10, (name, f.name)


def test_statistics_table_is_consistent():
    for op, (operands, names) in OP_STATISTICS.items():
        assert op.startswith("aten.") and operands
        for name in names:
            assert STATISTICS[name].condition in CONDITIONS
    assert all(parse_version(stat.added_in) <= parse_version(SCHEMA_VERSION) for stat in STATISTICS.values())


def test_version_rule_accepts_own_major_and_refuses_others():
    major, minor = parse_version(SCHEMA_VERSION)
    assert check_readable(f"{major}.{minor + 7}", "t") == (major, minor + 7)
    assert check_readable(f"{major}.0", "t") == (major, 0)
    with pytest.raises(SchemaVersionError, match=rf"{major + 1}\.0.*{SCHEMA_VERSION}"):
        check_readable(f"{major + 1}.0", "trace/manifest.json")
    with pytest.raises(SchemaVersionError, match="malformed"):
        parse_version("one")


# --- round trip of every column of every table, values drawn by hypothesis ------------------

def _values(type_: pa.DataType, nullable: bool):
    if pa.types.is_dictionary(type_):
        base = st.text(alphabet="abcdefgh._", min_size=1, max_size=8)
    elif pa.types.is_list(type_):
        base = st.lists(_values(type_.value_type, False), max_size=4)
    elif pa.types.is_boolean(type_):
        base = st.booleans()
    elif pa.types.is_integer(type_):
        bits = type_.bit_width - 1
        base = st.integers(-(2**bits), 2**bits - 1)
    elif pa.types.is_floating(type_):
        base = st.floats(allow_nan=False, width=64)
    elif pa.types.is_large_binary(type_) or pa.types.is_binary(type_):
        base = st.binary(max_size=16)
    else:
        base = st.text(max_size=12)
    return st.one_of(st.none(), base) if nullable else base


def _rows(schema: pa.Schema):
    return st.lists(st.fixed_dictionaries({f.name: _values(f.type, f.nullable) for f in schema}), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_column_round_trips_through_parquet_and_duckdb(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("trace")
    name = data.draw(st.sampled_from(sorted(TABLES)))
    rows = data.draw(_rows(TABLES[name]))
    if name in BUFFER_RUNS:  # a run field's rows number 0, 1, ... within each run of equal values
        # (an event's tensors: the buffer holds the seq once and rejects a k out of order)
        value_field, index_field = BUFFER_RUNS[name]
        for before, row in zip([None, *rows], rows):
            row[index_field] = before[index_field] + 1 if before and before[value_field] == row[value_field] else 0
    writer = TraceWriter(path)
    for row in rows:
        writer.tables[name].append(**row)
    writer.close()
    with open_trace(path) as trace:
        columns = [f.name for f in TABLES[name]]
        view = "tensor_states" if name == "tensors" else name
        got = trace.arrow(f"SELECT {', '.join(columns)} FROM {view}").to_pylist()
    assert got == rows
