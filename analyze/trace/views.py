"""The DuckDB views over a trace's Parquet parts: one per table, plus a few derived ones.

Every table view spans all parts of all ranks and has the columns of the reader's schema
(schemas.tables) in schema order, then `rank` (INTEGER, from the `rank=R` directory), then
any extra columns the files hold (written by a newer minor version). A column the files lack
(written by an older minor version) reads as a typed NULL, and a table with no parts reads as
an empty view with the same columns. Dictionary-encoded strings read as plain VARCHAR.

Views whose name differs from the table's, or that are derived:

- `tensor_states`: the raw `tensors` table.
- `tensors`: `tensor_states` plus `freed_seq` (from `tensor_frees`, matched on rank and uid;
  NULL when the object was still alive when the capture ended).
- `stages`: one row per (rank, stage_id), pairing the begin and end markers of
  `stage_markers`: name, phase, phase_source, reuse_weights, batch_norm_backward, b_index,
  t_index, step, begin_seq, end_seq (NULL if the stage never ended).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from schemas.tables import TABLES

# DuckDB schema holding one empty, typed table per trace table: the columns every view has.
EMPTY_SCHEMA = "spiketrace_empty"
# Tables whose raw view is renamed because a richer view takes the table's name.
RAW_VIEW_NAMES = {"tensors": "tensor_states"}

DERIVED_VIEWS = {
    "tensors": """
        SELECT t.*, f.freed_seq
        FROM tensor_states AS t
        LEFT JOIN (SELECT rank, uid, min(freed_seq) AS freed_seq FROM tensor_frees GROUP BY rank, uid) AS f
          ON f.rank = t.rank AND f.uid = t.uid
    """,
    "stages": """
        SELECT b.rank, b.stage_id, b.name, b.phase, b.phase_source, b.reuse_weights,
               b.batch_norm_backward, b.b_index, b.t_index, b.step,
               b.seq AS begin_seq, e.end_seq
        FROM (SELECT * FROM stage_markers WHERE kind = 'begin') AS b
        LEFT JOIN (SELECT rank, stage_id, min(seq) AS end_seq FROM stage_markers
                   WHERE kind = 'end' GROUP BY rank, stage_id) AS e
          ON e.rank = b.rank AND e.stage_id = b.stage_id
    """,
}


# A record's place across ranks as one BIGINT: the rank above bit 40, the rank's seq below.
SEQ_SPAN = 1 << 40


def record_key(rank: str, seq: str) -> str:
    """SQL for the key of record `seq` of rank `rank` (column expressions). Positions compare
    as keys: `record_key(e) > record_key(start) AND record_key(e) < record_key(end)` is a pure
    range join, which DuckDB runs sort-based (IEJoin), in time linear in its inputs and
    output; `e.rank = r.rank AND e.seq > r.start ...` is a hash join on rank that compares
    every pair of a rank's records, quadratic in the trace. A key also keeps rank out of the
    join's equalities, so the optimizer cannot derive a join on rank alone between two other
    tables of the query. A seq past 2**40 - 1 (the open end of a range) clamps to it."""
    return f"((({rank})::BIGINT << 40) + least(({seq})::BIGINT, {SEQ_SPAN - 1}))"


def view_name(table: str) -> str:
    """The name of the view holding `table`'s rows as written."""
    return RAW_VIEW_NAMES.get(table, table)


def reader_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` as the views expose it: dictionary strings as plain strings, plus `rank`."""
    fields = [
        f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema
    ]
    return pa.schema(fields + [pa.field("rank", pa.int32())])


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def quote_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _create_empty_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"CREATE SCHEMA {EMPTY_SCHEMA}")
    for table, schema in TABLES.items():
        con.register("spiketrace_empty_arrow", reader_schema(schema).empty_table())
        con.execute(f"CREATE TABLE {EMPTY_SCHEMA}.{table} AS SELECT * FROM spiketrace_empty_arrow")
        con.unregister("spiketrace_empty_arrow")


def path_keys(root: Path) -> list[str]:
    """Keys DuckDB's hive partitioning would read from `root` itself (a `lr=0.1/` directory)."""
    return sorted({part.split("=", 1)[0] for part in root.parts if "=" in part and not part.startswith("=")})


def table_view_sql(table: str, files: list[Path], exclude: list[str] = ()) -> str:
    """SELECT over `files` with the columns described in the module docstring.

    `exclude` names columns hive partitioning takes from directories above the trace.
    """
    empty = f"SELECT * FROM {EMPTY_SCHEMA}.{table}"
    if not files:
        return empty
    file_list = ", ".join(sql_string(str(path)) for path in files)
    excluded = f" EXCLUDE ({', '.join(quote_name(key) for key in exclude)})" if exclude else ""
    # The empty typed table goes first: UNION BY NAME keeps its column order and types, fills
    # columns the files lack with NULL and appends the files' extra columns.
    return (
        f"{empty} UNION ALL BY NAME SELECT *{excluded} FROM read_parquet([{file_list}], "
        "union_by_name = true, hive_partitioning = true, hive_types = {'rank': 'INTEGER'})"
    )


SQL_VIEW_DIR = Path(__file__).resolve().parent / "sql_views"


def sql_views(directory: Path = SQL_VIEW_DIR) -> dict[str, tuple[str, str]]:
    """Named breakdown views shipped as SQL files: name -> (what it answers, query).

    Each file starts with `-- name: question` and more comment lines explaining the rows."""
    views = {}
    for path in sorted(directory.glob("*.sql")):
        text = path.read_text()
        header = [line[2:].strip() for line in text.splitlines() if line.startswith("--")]
        summary = header[0].split(":", 1)[1].strip() if header and ":" in header[0] else ""
        views[path.stem] = (summary, text)
    return views


def create_views(con: duckdb.DuckDBPyConnection, root: Path, files: dict[str, list[Path]]) -> None:
    """Create every table view and derived view on `con`; `files` maps table -> its parts."""
    _create_empty_tables(con)
    exclude = [key for key in path_keys(root) if key != "rank"]
    for table in TABLES:
        query = table_view_sql(table, files.get(table, []), exclude)
        con.execute(f"CREATE VIEW {view_name(table)} AS {query}")
    for name, query in DERIVED_VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {query}")
    for name, (_, query) in sql_views().items():
        con.execute(f"CREATE VIEW {name} AS {query}")
