"""The DuckDB views over a trace's Parquet parts: one per table, plus a few derived ones.

Every table view spans all parts of all ranks and has the columns of the reader's schema
(spiketrace.schemas.tables) in schema order, then `rank` (INTEGER, from the `rank=R` directory), then
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

import contextlib
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from spiketrace.schemas.tables import TABLES

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


def table_view_sql(table: str, files: list[Path], exclude: Sequence[str] = ()) -> str:
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


# -- a selection of the rows: --stage, --phase, --step, --rank, --module ----------------------

# Schema holding each table view as created, while the view of its name in `main` shows a
# selection of its rows (selected_views).
UNSELECTED_SCHEMA = "spiketrace_unselected"
# Tables whose `seq` is the seq of an event: they keep the rows of the selected events.
EVENT_ROW_TABLES = ("event_tensors", "op_stats", "packed_inputs", "collectives", "neuron_memories")


def _in(column: str, value) -> str:
    return f"{column} = {sql_string(value) if isinstance(value, str) else int(value)}"


def _module_ids(module: str) -> str:
    """(rank, module_id) of the modules at or under tracker scope `module` (a tracker name, or
    the path of a module without one): SQL over the unselected `modules`."""
    name = "coalesce(tracker_name, path)"
    return (f"(rank, module_id) IN (SELECT rank, module_id FROM {UNSELECTED_SCHEMA}.modules "
            f"WHERE {name} = {sql_string(module)} OR starts_with({name}, {sql_string(module + '.')}))")


def selection_filters(*, stage=None, phase=None, step=None, rank=None, module=None) -> dict[str, str]:
    """table view -> the SQL condition keeping its rows of the selection (views without an
    entry keep all their rows). Each table is restricted by what it records:

    - `events`: stage, phase, step, rank, and module: the events attributed to that scope
      (SpikingJelly's attribution: every scope in the tracker's parents, so a module's subtree);
    - `module_events`: stage, phase, step, rank, and module: the calls of that module and the
      modules under it;
    - `stage_markers` (so `stages`): stage (its name), phase, step, rank;
    - event_tensors, op_stats, packed_inputs, collectives, neuron_memories: the rows of the
      selected events;
    - optimizer_steps: step, rank, stage and phase (of the stage it ran in), module (of its
      parameter);
    - every other table (tensors, tensor_frees, scopes, modules): rank.

    Module "Global" is everything, as SpikingJelly's tracker names it."""
    module = None if module == "Global" else module
    ranked = [_in("rank", rank)] if rank is not None else []
    filters = {table: list(ranked) for table in TABLES}
    for table, columns in (("events", {"stage": stage, "phase": phase, "step": step}),
                           ("module_events", {"stage": stage, "phase": phase, "step": step}),
                           ("stage_markers", {"name": stage, "phase": phase, "step": step}),
                           ("optimizer_steps", {"step": step})):
        filters[table] += [_in(column, value) for column, value in columns.items() if value is not None]
    if stage is not None or phase is not None:  # an optimizer step ran inside a selected stage
        filters["optimizer_steps"].append(
            "EXISTS (SELECT 1 FROM stages s WHERE s.rank = optimizer_steps.rank AND optimizer_steps.seq "
            "BETWEEN s.begin_seq AND coalesce(s.end_seq, optimizer_steps.seq))")
    if module is not None:
        filters["events"].append(f"(rank, scope_id) IN (SELECT rank, scope_id FROM {UNSELECTED_SCHEMA}.scopes "
                                 f"WHERE list_contains(parents, {sql_string(module)}))")
        filters["module_events"].append(_module_ids(module))
        filters["optimizer_steps"].append(_module_ids(module))
    if any(v is not None for v in (stage, phase, step, module)):
        for table in EVENT_ROW_TABLES:
            filters[table].append("(rank, seq) IN (SELECT rank, seq FROM events)")  # the selected events
    return {view_name(table): " AND ".join(clauses) for table, clauses in filters.items() if clauses}


def view_body(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """The query of view `name` of schema main, as create_views made it."""
    rows = con.execute("SELECT sql FROM duckdb_views() WHERE schema_name = 'main' AND view_name = ?", [name]).fetchall()
    row = rows[0] if rows else None
    prefix = f"CREATE VIEW {name} AS "
    if row is None or not row[0].startswith(prefix):
        raise RuntimeError(f"no view {name!r} as create_views makes it")
    return row[0][len(prefix):].rstrip().rstrip(";")


@contextlib.contextmanager
def selected_views(con: duckdb.DuckDBPyConnection, **selection):
    """Within the block, the table views of `con` show only the rows of `selection` (stage,
    phase, step, rank, module; see selection_filters), and so does every view built on them
    (stages, tensors, module_ops, layer_spike_rates, collective_traffic, ...: DuckDB binds a
    view's query when it is run). On exit the views show every row again."""
    filters = selection_filters(**selection)
    if not filters:
        yield
        return
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {UNSELECTED_SCHEMA}")
    kept = {row[0] for row in con.execute("SELECT view_name FROM duckdb_views() WHERE schema_name = ?",
                                          [UNSELECTED_SCHEMA]).fetchall()}
    for name in (view_name(table) for table in TABLES):  # every table, so conditions can read them whole
        if name not in kept:
            con.execute(f"CREATE VIEW {UNSELECTED_SCHEMA}.{name} AS {view_body(con, name)}")
    try:
        for name, condition in filters.items():
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {UNSELECTED_SCHEMA}.{name} WHERE {condition}")
        yield
    finally:
        for name in filters:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {UNSELECTED_SCHEMA}.{name}")
